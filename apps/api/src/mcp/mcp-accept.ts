import type { IncomingMessage } from 'node:http';

/** The media types a POST to /mcp must accept: the answer is JSON or an SSE stream, at the transport's choice. */
const REQUIRED = ['application/json', 'text/event-stream'] as const;

/** The transport's own words for a refused Accept (406, JSON-RPC -32000), kept as the start of ours. */
export const NOT_ACCEPTABLE = 'Not Acceptable: Client must accept both application/json and text/event-stream';

/** A qvalue (RFC 9110, section 12.4.2): 0 to 1, three decimals at most. */
const QVALUE = /^(?:0(?:\.\d{0,3})?|1(?:\.0{0,3})?)$/;

/**
 * Why the Accept of a POST to /mcp is refused, or null when it lists both media types the transport answers with. The
 * SDK's transport looks for them as substrings, case-sensitively: `Application/JSON` was refused, though media types
 * are case-insensitive (RFC 9110, section 8.3.1), and `text/event-stream;q=0` (section 12.4.2: "not acceptable") or
 * `text/event-streams` taken. Judged here instead: each must be named (no wildcard: the transport's rule), by any
 * letter case, and never with q=0; a q that is no quality value is refused, not guessed at.
 */
export function acceptRefusal(accept: string | undefined): string | null {
  const weights = new Map<string, number[]>();
  for (const range of splitOutsideQuotes(accept ?? '', ',')) {
    const [type, ...params] = splitOutsideQuotes(range, ';').map((part) => part.trim());
    if (type === '') continue;
    let weight = 1;
    for (const param of params) {
      const at = param.indexOf('=');
      if (at < 0 || param.slice(0, at).trim().toLowerCase() !== 'q') continue;
      const value = param.slice(at + 1).trim();
      if (!QVALUE.test(value)) {
        return `${NOT_ACCEPTABLE} (q=${JSON.stringify(value.slice(0, 40))} is no quality value: 0 to 1, three decimals at most)`;
      }
      weight = Number(value);
    }
    const name = type.toLowerCase();
    weights.set(name, [...(weights.get(name) ?? []), weight]);
  }
  const refused = REQUIRED.filter((type) => weights.get(type)?.includes(0));
  if (refused.length > 0) return `${NOT_ACCEPTABLE} (${refused.join(' and ')}: q=0 says not acceptable)`;
  if (REQUIRED.some((type) => !weights.has(type))) return NOT_ACCEPTABLE;
  return null;
}

/**
 * An Accept acceptRefusal took, rewritten as the transport's substring check reads it (both types in lower case), in
 * the parsed headers and in the raw ones the transport builds its request from.
 */
export function normaliseAccept(req: IncomingMessage): void {
  const accept = REQUIRED.join(', ');
  req.headers.accept = accept;
  const raw: string[] = [];
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    if (req.rawHeaders[i].toLowerCase() !== 'accept') raw.push(req.rawHeaders[i], req.rawHeaders[i + 1]);
  }
  raw.push('accept', accept);
  req.rawHeaders.splice(0, req.rawHeaders.length, ...raw);
}

/** `text` split at each `separator` outside a quoted string (a parameter's value may quote one). */
function splitOutsideQuotes(text: string, separator: string): string[] {
  const parts: string[] = [];
  let quoted = false;
  let start = 0;
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i];
    if (quoted && c === '\\') i += 1;
    else if (c === '"') quoted = !quoted;
    else if (!quoted && c === separator) {
      parts.push(text.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(text.slice(start));
  return parts;
}
