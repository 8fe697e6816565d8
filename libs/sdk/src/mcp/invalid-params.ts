import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { ClientRequestSchema, ErrorCode, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { textPrefix } from '@verity/status-model';

/** The MCP SDK's schema of each request a client may send, by method. */
const REQUEST_SCHEMAS = new Map<string, (typeof ClientRequestSchema.options)[number]>(
  ClientRequestSchema.options.map((schema) => [schema.shape.method.value, schema]),
);

interface Issue {
  path: readonly PropertyKey[];
  message: string;
}

/**
 * The JSON-RPC error for a request whose params do not fit its method (-32602, Invalid params), or undefined when they
 * fit, when it is no request, or when `handles(method)` says no handler would answer it (that answer, -32601, is the
 * SDK's).
 */
export function invalidParamsError(message: unknown, handles: (method: string) => boolean): JSONRPCMessage | undefined {
  if (typeof message !== 'object' || message === null || Array.isArray(message)) return undefined;
  const { id, method } = message as { id?: unknown; method?: unknown };
  if (typeof method !== 'string' || !(typeof id === 'string' || typeof id === 'number')) return undefined;
  const schema = REQUEST_SCHEMAS.get(method);
  if (schema === undefined || !handles(method)) return undefined;
  const parsed = schema.safeParse(message);
  const issues = parsed.success ? unparsableUri(message) : (parsed.error.issues as Issue[]).map(describeIssue);
  if (issues.length === 0) return undefined;
  return {
    jsonrpc: '2.0',
    id,
    error: { code: ErrorCode.InvalidParams, message: `Invalid params of ${method}: ${issues.join('; ')}` },
  };
}

/**
 * A resources/read whose uri is a string but no URI (`""`, `exe_…`): the SDK parses it with `new URL` and answered the
 * TypeError -32603 "Invalid URL" (Internal error), as if the server had failed on a request it should have refused.
 */
function unparsableUri(message: object): string[] {
  const { method, params } = message as { method?: unknown; params?: { uri?: unknown } };
  const uri = params?.uri;
  if (method !== 'resources/read' || typeof uri !== 'string' || URL.canParse(uri)) return [];
  return [`params.uri: expected a URI (verity://executions/{id}), received ${JSON.stringify(textPrefix(uri, 200))}`];
}

/** "params.arguments must be an object (it is null): …", in the words of the protocol, not of zod. */
function describeIssue(issue: Issue): string {
  const path = issue.path.map(String).join('.') || 'the request';
  const what = issue.message
    .replace(/^Invalid input: /, '')
    .replace(/\bexpected record\b/, 'expected an object')
    .replace(/\bexpected string\b/, 'expected a string');
  const hint = path === 'params.arguments' ? ' (the tool’s arguments by name: send {} or leave it out for none)' : '';
  return `${path}: ${what}${hint}`;
}

/**
 * Answers a request whose params do not fit its method with -32602 (Invalid params) before the server sees it. The
 * SDK's own check parses them against the same schema but answers a mismatch -32603 (Internal error) with zod's
 * issues as the message (modelcontextprotocol/typescript-sdk#2012): a client, or an agent reading it, would take its
 * own mistake (`"arguments": null`, common in clients that write an absent field as null) for a broken server.
 * Installed on a connected transport, in front of the server's own handler.
 */
export function refuseInvalidParams(transport: Transport, handles: (method: string) => boolean): void {
  const deliver = transport.onmessage;
  transport.onmessage = (message, extra) => {
    const refusal = invalidParamsError(message, handles);
    if (refusal === undefined) {
      deliver?.(message, extra);
      return;
    }
    const id = (refusal as { id: string | number }).id;
    transport.send(refusal, { relatedRequestId: id }).catch(() => undefined); // the client left: nobody to tell
  };
}

/**
 * A `tools/call` whose name is a member every object inherits (`toString`, `constructor`, `__proto__`…), answered as
 * any other name no tool has: the tool result the SDK gives an unknown tool ("Tool … not found", `isError`). The SDK
 * looks tools up in a plain object, finds the inherited member and answered "Tool toString disabled", as if such a
 * tool existed and had been switched off. Installed on a connected transport, in front of the server's own handler.
 */
export function refuseInheritedToolNames(transport: Transport): void {
  const deliver = transport.onmessage;
  transport.onmessage = (message, extra) => {
    const id = (message as { id?: unknown }).id;
    const params = (message as { params?: unknown }).params;
    const name = typeof params === 'object' && params !== null ? (params as { name?: unknown }).name : undefined;
    if (
      (message as { method?: unknown }).method !== 'tools/call' ||
      !(typeof id === 'string' || typeof id === 'number') ||
      typeof name !== 'string' ||
      !(name in Object.prototype)
    ) {
      deliver?.(message, extra);
      return;
    }
    const answer: JSONRPCMessage = {
      jsonrpc: '2.0',
      id,
      result: {
        content: [{ type: 'text', text: `MCP error ${ErrorCode.InvalidParams}: Tool ${name} not found` }],
        isError: true,
      },
    };
    transport.send(answer, { relatedRequestId: id }).catch(() => undefined); // the client left: nobody to tell
  };
}

/**
 * A request's `params.task` (a request for task-augmented execution), dropped before the server sees it. This server
 * declares no tasks capability, and MCP 2025-11-25 has such a receiver "process requests of that type normally,
 * ignoring any task-augmentation metadata if present"; the SDK answered every such request -32603 (Internal error,
 * "Server does not support task creation"), a client's input read as a broken server. Ignored whatever its value,
 * as the specification says. Installed on a connected transport, in front of everything else.
 */
export function ignoreTaskAugmentation(transport: Transport): void {
  const deliver = transport.onmessage;
  transport.onmessage = (message, extra) => {
    const params = (message as { params?: unknown }).params;
    if (
      typeof (message as { method?: unknown }).method !== 'string' ||
      typeof params !== 'object' ||
      params === null ||
      Array.isArray(params) ||
      !Object.hasOwn(params, 'task')
    ) {
      deliver?.(message, extra);
      return;
    }
    const { task: _ignored, ...rest } = params as Record<string, unknown>;
    deliver?.({ ...message, params: rest } as JSONRPCMessage, extra);
  };
}
