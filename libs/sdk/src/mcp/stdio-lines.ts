import { Transform } from 'node:stream';
import { type JSONRPCMessage, JSONRPCMessageSchema } from '@modelcontextprotocol/sdk/types.js';
// The API's own reading of raw JSON (the check /mcp and /v1 make of a body), compiled into the package with the SDK.
import { memberPath, rawJsonIssue } from '../../../platform/src/raw-json';
import { readableRequestId } from './request-id';

/**
 * The most a line may take, its line feed included (10 MiB): the MCP SDK's stdio transport closes on a chunk that takes
 * what it holds past this, and each line is passed on to it as one chunk.
 */
export const MAX_STDIO_LINE_BYTES = 10 * 1024 * 1024;
const LINE_FEED = Buffer.from('\n');

const PARSE_ERROR = -32700;
const INVALID_REQUEST = -32600;
const LF = 0x0a;

/**
 * The lines of stdin that are JSON-RPC messages, one a line, for the MCP SDK's stdio transport; every other line is
 * answered here with a JSON-RPC error (through `answer`) and not passed on. The transport drops such a line in silence
 * (it tells only its onerror, which nobody hears): a request whose params do not fit its method (`"params": null`)
 * left its client waiting for an answer that never came, and a line past its 10 MiB bound closed the transport, so
 * the process exited 0 with no word. Here that line is answered and skipped to its end. Blank lines ask for nothing
 * and are skipped; /mcp answers the same bodies with the same codes.
 */
export function jsonRpcLines(answer: (message: JSONRPCMessage) => void): Transform {
  let held: Buffer[] = [];
  let heldBytes = 0;
  /** Past the bound: the rest of this line is skipped, up to its end. */
  let skipping = false;
  const refuse = (code: number, message: string, id: string | number | null = null) =>
    answer({ jsonrpc: '2.0', id, error: { code, message } } as unknown as JSONRPCMessage);

  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      let from = 0;
      while (from < chunk.length) {
        const end = chunk.indexOf(LF, from);
        const piece = chunk.subarray(from, end < 0 ? chunk.length : end);
        from = end < 0 ? chunk.length : end + 1;
        if (!skipping) {
          held.push(piece);
          heldBytes += piece.length;
        }
        // With the line feed still to come, the line would no longer fit.
        if (!skipping && heldBytes + LINE_FEED.length > MAX_STDIO_LINE_BYTES) {
          skipping = true;
          held = [];
          heldBytes = 0;
          refuse(
            INVALID_REQUEST,
            `Invalid Request: a line longer than ${MAX_STDIO_LINE_BYTES} bytes, its line feed included (it was skipped to its end)`,
          );
        }
        if (end < 0) break;
        if (skipping) {
          skipping = false;
          continue;
        }
        const raw = Buffer.concat(held);
        const line = raw.toString('utf8').replace(/\r$/, '');
        held = [];
        heldBytes = 0;
        const verdict = judge(line);
        if (verdict === 'blank') continue;
        // The bytes read, not `line` encoded again: a byte that is no UTF-8 decodes to U+FFFD, three bytes, so the
        // re-encoding of a line within the bound could pass it (the transport decodes the bytes alike).
        if (verdict === 'message') this.push(Buffer.concat([raw, LINE_FEED]));
        else refuse(verdict.code, verdict.message, verdict.id);
      }
      done();
    },
  });
}

type Verdict = 'message' | 'blank' | { code: number; message: string; id: string | number | null };

function judge(line: string): Verdict {
  if (line.trim() === '') return 'blank';
  let parsed: unknown;
  try {
    parsed = JSON.parse(line);
  } catch {
    return { code: PARSE_ERROR, message: 'Parse error: the line is not valid JSON', id: null };
  }
  if (Array.isArray(parsed)) {
    return {
      code: INVALID_REQUEST,
      message: 'Invalid Request: a batch (over stdio, send one message per line; nothing in it was carried out)',
      id: null,
    };
  }
  // What the parsed line would no longer show: a member named twice (JSON.parse keeps the last), a number a double
  // rounds, one that parses to ±Infinity (sent on to the API as null). /mcp refuses such a body -32600; passed on here,
  // a submission was made with another amount than the line said.
  const hidden = hiddenByParsing(line, parsed);
  if (hidden !== null) {
    return {
      code: INVALID_REQUEST,
      message: `Invalid Request: ${hidden.said} (nothing in the line was carried out)`,
      // An id that is itself what was hidden (given twice, rounded) is no id of the request's: null, as /mcp answers.
      id: hidden.field === 'id' ? null : readableRequestId(parsed),
    };
  }
  if (JSONRPCMessageSchema.safeParse(parsed).success) return 'message';
  return {
    code: INVALID_REQUEST,
    message: 'Invalid Request: the line is no JSON-RPC 2.0 request, notification or response',
    id: readableRequestId(parsed),
  };
}

/** What the line says that its parsed value hides, in words naming the member, or null. */
function hiddenByParsing(line: string, parsed: unknown): { field: string; said: string } | null {
  const issue = rawJsonIssue(line);
  if (issue) {
    const said = issue.rule === 'duplicate_key' ? 'is given twice' : 'holds a number a double cannot keep exactly';
    return { field: issue.field, said: `${issue.field} ${said}` };
  }
  const infinite = nonFiniteNumberAt(parsed);
  return infinite === null ? null : { field: infinite, said: `${infinite} holds a number that is not finite` };
}

/** The path of the first number that parsed to ±Infinity, or null. Iterative: no nesting exhausts the stack. */
function nonFiniteNumberAt(value: unknown): string | null {
  const stack: { node: unknown; path: string }[] = [{ node: value, path: '' }];
  while (stack.length > 0) {
    const { node, path } = stack.pop()!;
    if (typeof node === 'number' && !Number.isFinite(node)) return path || '(message)';
    if (Array.isArray(node)) node.forEach((item, i) => stack.push({ node: item, path: `${path}[${i}]` }));
    else if (node !== null && typeof node === 'object') {
      for (const [key, item] of Object.entries(node)) stack.push({ node: item, path: memberPath(path, key) });
    }
  }
  return null;
}
