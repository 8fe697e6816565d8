import type { Request, Response } from 'express';
import { FieldError, Problem, sendProblem } from '../problem/problem';

/** The MCP endpoint (Streamable HTTP): its POST bodies are JSON-RPC 2.0 messages. */
export const MCP_PATH = '/mcp';

/**
 * The JSON-RPC error codes the endpoint answers a refused body with: JSON-RPC 2.0's own two, and -32000 for a refusal of
 * the HTTP message rather than of its JSON (too large, another charset), as the MCP SDK's transport answers its 406 and
 * 415.
 */
export const JSON_RPC_CODE = { parseError: -32700, invalidRequest: -32600, transport: -32000 } as const;
export type JsonRpcErrorCode = (typeof JSON_RPC_CODE)[keyof typeof JSON_RPC_CODE];

const PREFIX: Record<JsonRpcErrorCode, string> = {
  [JSON_RPC_CODE.parseError]: 'Parse error: ',
  [JSON_RPC_CODE.invalidRequest]: 'Invalid Request: ',
  [JSON_RPC_CODE.transport]: '',
};

/** How a problem's detail names the whole body as the field at fault (see Problem.validation). */
const BODY_FIELD = '(body): ';

/** A JSON-RPC request id: a string or a number; null where it could not be determined. */
export type JsonRpcId = string | number | null;

/**
 * A JSON-RPC error answer, by default with no request id (the request was not read, or not as one message). JSON-RPC
 * 2.0: the id is null only when it could not be determined.
 */
export function sendJsonRpcError(
  res: Response,
  status: number,
  code: JsonRpcErrorCode,
  message: string,
  data?: Record<string, unknown>,
  id: JsonRpcId = null,
): void {
  res.status(status).json({ jsonrpc: '2.0', id, error: data ? { code, message, data } : { code, message } });
}

/**
 * The id of a request refused for a member of its body, where it can be determined: one message (not a batch) whose
 * `id` is a string or a finite number and is not itself what was refused (given twice, or holding what no body may).
 * `body` is the parsed message, or its raw text (a refusal made before parsing: the text is valid JSON).
 */
export function refusedRequestId(body: unknown, refusedFields: readonly string[]): JsonRpcId {
  if (refusedFields.some((field) => field === 'id' || field.startsWith('id.') || field.startsWith('id['))) return null;
  let message = body;
  if (typeof body === 'string' || Buffer.isBuffer(body)) {
    try {
      message = JSON.parse(body.toString());
    } catch {
      return null;
    }
  }
  if (typeof message !== 'object' || message === null || Array.isArray(message) || !Object.hasOwn(message, 'id')) {
    return null;
  }
  const id = (message as { id: unknown }).id;
  return typeof id === 'string' || (typeof id === 'number' && Number.isFinite(id)) ? id : null;
}

/**
 * A refusal of a request's body made before any route reads it (charset, parser, what no body may hold). A client of
 * the MCP endpoint reads JSON-RPC, and the transport answers its own refusals as JSON-RPC errors: there the refusal is
 * one too, with the problem's HTTP status and its detail as the message. Everywhere else it is the problem.
 */
export function refuseBody(
  req: Pick<Request, 'method' | 'path' | 'originalUrl'>,
  res: Response,
  problem: Problem,
  code: JsonRpcErrorCode,
  /** The body as far as it was read (parsed, or its raw text), where the refusal is of a member of valid JSON. */
  readBody?: unknown,
): void {
  if (req.method !== 'POST' || req.path !== MCP_PATH) {
    sendProblem(req, res, problem);
    return;
  }
  if (res.headersSent) {
    res.end();
    return;
  }
  for (const [name, value] of Object.entries(problem.headers)) res.setHeader(name, value);
  // The request log names the refusal as it would have named the problem.
  res.locals.problem = problem.code;
  const errors = problem.extras.errors as FieldError[] | undefined;
  // "(body): the body is not valid JSON" reads better without the field that names the whole body.
  const detail = problem.detail ?? problem.title;
  const said = detail.startsWith(BODY_FIELD) ? detail.slice(BODY_FIELD.length) : detail;
  const id =
    readBody === undefined
      ? null
      : refusedRequestId(
          readBody,
          (errors ?? []).map((e) => e.field),
        );
  sendJsonRpcError(res, problem.status, code, `${PREFIX[code]}${said}`, errors ? { errors } : undefined, id);
}
