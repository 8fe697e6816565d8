/** The tools the MCP server serves, sorted: what every client of it (HTTP, the stdio bin, the packed SDK) must list. */
export const MCP_TOOLS = [
  'cancel_execution',
  'get_execution',
  'get_operation',
  'list_connectors',
  'submit_execution',
  'wait_for_execution',
];
