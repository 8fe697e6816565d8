/**
 * The id of what was meant as a JSON-RPC request but is none (its params do not fit its method, `"jsonrpc": "1.0"`),
 * where one can be read: a string or an integer; null otherwise. JSON-RPC 2.0 answers an Invalid Request with the
 * request's id, null only when the id could not be determined, so that the client can match the error to its call
 * instead of waiting for its own timeout. Shared by the stdio entry point and the API's /mcp.
 */
export function readableRequestId(value: unknown): string | number | null {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return null;
  const id = (value as { id?: unknown }).id;
  return typeof id === 'string' || (typeof id === 'number' && Number.isInteger(id)) ? id : null;
}
