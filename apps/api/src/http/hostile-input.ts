import type { NextFunction, Request, Response } from 'express';
import { isUtf8 } from 'node:buffer';
import { rawJsonIssue, repeatedHeader } from '@verity/platform';
import { type ParsedUrlQuery, parse as parseQueryString } from 'node:querystring';
import { JSON_RPC_CODE, refuseBody } from '../mcp/json-rpc-error';
import { Problem, sendProblem } from '../problem/problem';
import { unsupportedEncoding } from './body-errors';
import { hasBody, markEmptyBody } from './parse';
import { jsonInputIssues, textIssue } from './text';

/**
 * Request-wide checks that no single route should have to remember: a path segment or query parameter that no id or
 * value can contain, a body that arrives too slowly, bytes that are not UTF-8, and JSON that holds what no schema
 * accepts (see text.ts). Each answers a problem+json 4xx before anything reads the database.
 */

/**
 * express's query parser ("simple": node:querystring) with no limit on the number of parameters. Node's default reads
 * the first 1,000 `&`-separated pieces and drops the rest without a word, so a parameter after 1,000 empty ones
 * (`?&&…&dry_run=true`) was never seen: not refused as unknown, not validated, and the request did what it would
 * have done without it (a DELETE of a connector's settings cleared them). The request line is at most 16 KiB, which
 * bounds the count.
 */
export function parseWholeQuery(query: string): ParsedUrlQuery {
  return parseQueryString(query, '&', '=', { maxKeys: 0 });
}

/**
 * The query's names and values whose percent-decoded bytes are not UTF-8, each as the field an error names (its name
 * decoded, or as sent when the name is what is broken). The query parser reads such bytes as U+FFFD: `?q=%ED%A0%80`
 * searched for "���" and `?connector=%C0%AF` for a connector of that name, answering 200 for what no one asked.
 */
function nonUtf8QueryFields(url: string): string[] {
  const at = url.indexOf('?');
  // Without an escape nothing decodes to a byte (every request's case: nothing to look through).
  if (at < 0 || url.indexOf('%', at) < 0) return [];
  // As the parser decodes: each %XX one byte, a "%" that starts no escape kept as written.
  const isUtf8Decoded = (raw: string) =>
    isUtf8(
      Buffer.concat(
        raw
          .split(/(%[0-9a-f]{2})/i)
          .map((part) => (/^%[0-9a-f]{2}$/i.test(part) ? Buffer.from(part.slice(1), 'hex') : Buffer.from(part))),
      ),
    );
  return url
    .slice(at + 1)
    .split('&')
    .flatMap((piece) => {
      const eq = piece.indexOf('=');
      const name = eq < 0 ? piece : piece.slice(0, eq);
      const value = eq < 0 ? '' : piece.slice(eq + 1);
      if (!isUtf8Decoded(name)) return [name];
      return isUtf8Decoded(value) ? [] : [Object.keys(parseWholeQuery(name))[0] ?? name];
    });
}

/**
 * A path segment with a control character or broken Unicode names nothing (404); such a query name or value, or one
 * whose bytes are not UTF-8, is a 400.
 */
export function rejectUnsafeUrl(req: Request, res: Response, next: NextFunction): void {
  const notUtf8 = nonUtf8QueryFields(req.originalUrl);
  if (notUtf8.length > 0) {
    const message = 'not valid UTF-8 once percent-decoded (each %XX is one byte of UTF-8 text)';
    sendProblem(req, res, Problem.validation(notUtf8.map((field) => ({ field, rule: 'utf8', message }))));
    return;
  }
  for (const segment of req.path.split('/')) {
    let decoded: string;
    try {
      decoded = decodeURIComponent(segment);
    } catch {
      continue; // bad percent-encoding: refused as a 400 by the router's own check
    }
    if (textIssue(decoded)) {
      sendProblem(req, res, new Problem(404, 'not-found', 'Not found', 'no resource has an id like this'));
      return;
    }
  }
  const errors = Object.entries(req.query as Record<string, unknown>).flatMap(([name, value]) => {
    const values = Array.isArray(value) ? value : [value];
    const found = [name, ...values.filter((v): v is string => typeof v === 'string')]
      .map(textIssue)
      .find((issue) => issue !== null);
    return found ? [{ field: name, ...found }] : [];
  });
  if (errors.length > 0) {
    sendProblem(req, res, Problem.validation(errors));
    return;
  }
  next();
}

/** A header that must come once (`Authorization`, `Content-Type`, `Idempotency-Key`, `Host`) given twice: 400. */
export function rejectRepeatedHeaders(req: Request, res: Response, next: NextFunction): void {
  const repeated = repeatedHeader(req);
  if (repeated) {
    sendProblem(req, res, new Problem(repeated.status, repeated.code, repeated.title, repeated.detail));
    return;
  }
  next();
}

/**
 * A body sent with a transfer coding other than `chunked` (`Transfer-Encoding: gzip, chunked`): Node undoes the
 * chunking only and hands on the bytes as if no other coding had been named, so a body that said it was gzip and was
 * not was read as plain JSON and carried out, and an intermediary that does undo the coding reads another body than the
 * API. RFC 9112 (section 6.1) has a server refuse a coding it does not know; refused here, naming the header, before the
 * body is read. (Node itself refuses a request whose last coding is not `chunked`, and `chunked` twice.)
 */
export function rejectTransferCodings(req: Request, res: Response, next: NextFunction): void {
  const header = req.headers['transfer-encoding'];
  if (header !== undefined && !/^[ \t]*chunked[ \t]*$/i.test(header)) {
    const problem = new Problem(
      400,
      'bad-request',
      'Unsupported transfer coding',
      'transfer-encoding may name chunked only: send the body chunked or with Content-Length, compressed (if at all) ' +
        'as Content-Encoding: gzip, deflate or br',
    );
    refuseBody(req, res, problem, JSON_RPC_CODE.transport);
    return;
  }
  next();
}

/**
 * A PUT whose body says it is a part of one (`Content-Range`): a PUT replaces the whole representation, so RFC 9110
 * (section 14.5) has a server that allows PUT answer 400, the body being likely a part sent by mistake as the whole.
 * Taken as the whole, a part that parses (an uploader's first piece) replaced the settings with itself. Refused before
 * the body is read.
 */
export function rejectPartialPut(req: Request, res: Response, next: NextFunction): void {
  if (req.method === 'PUT' && req.headers['content-range'] !== undefined) {
    const problem = new Problem(
      400,
      'bad-request',
      'Partial PUT',
      'a PUT replaces the whole resource: send the whole body, without Content-Range; nothing was written',
    );
    sendProblem(req, res, problem);
    return;
  }
  next();
}

/**
 * A body is UTF-8 JSON. The JSON parser refuses most other charsets itself (415), but decodes any `utf-*` (UTF-16
 * among them) into text that then fails as JSON or as UTF-8 with a 400 that names the wrong cause: refused here, as
 * every other charset is.
 */
export function rejectOtherCharsets(req: Request, res: Response, next: NextFunction): void {
  const charsets = [...(req.headers['content-type'] ?? '').matchAll(/;\s*charset\s*=\s*"?([^";\s]*)/gi)];
  // Named twice, the body is read by the first while a proxy or firewall in front may read the last: two readers,
  // two texts. Refused whatever the two say.
  if (charsets.length > 1) {
    const problem = new Problem(415, 'unsupported-media-type', 'Unsupported charset', 'name one charset: UTF-8');
    refuseBody(req, res, problem, JSON_RPC_CODE.transport);
    return;
  }
  const charset = charsets[0]?.[1].toLowerCase();
  if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
    const problem = new Problem(415, 'unsupported-media-type', 'Unsupported charset', 'send UTF-8 JSON');
    refuseBody(req, res, problem, JSON_RPC_CODE.transport);
    return;
  }
  // `utf8` names UTF-8 as well, but the JSON parser knows only `utf-8` (it would answer 415): spelled its way.
  if (charset === 'utf8') {
    req.headers['content-type'] = req.headers['content-type']!.replace(/(;\s*charset\s*=\s*"?)utf8/i, '$1utf-8');
  }
  next();
}

/** The content codings a body may be sent in (`identity`: none). */
const CONTENT_CODINGS = new Set(['identity', 'gzip', 'deflate', 'br']);

/**
 * A body in a content coding besides gzip, deflate and br: 415, before it is read. The JSON parser also undoes zstd
 * where Node has it, so a body sent as zstd was carried out on one Node and refused on another, where the API names
 * the three. An empty Content-Encoding names no coding (an empty list), and the parser reads the body as it is.
 */
export function rejectOtherContentCodings(req: Request, res: Response, next: NextFunction): void {
  const coding = req.headers['content-encoding']?.trim().toLowerCase();
  if (coding && hasBody(req) && !CONTENT_CODINGS.has(coding)) {
    refuseBody(req, res, unsupportedEncoding(), JSON_RPC_CODE.transport);
    return;
  }
  next();
}

/**
 * A body must arrive within `ms` (a client sending a byte every few seconds would otherwise hold a connection and a
 * parser for minutes). The answer is a problem+json 408, and the connection is closed: the rest of the body is unread.
 */
export function bodyReadTimeout(ms: number) {
  return (req: Request, res: Response, next: NextFunction): void => {
    if (!hasBody(req)) {
      next();
      return;
    }
    const timer = setTimeout(() => {
      if (req.complete || res.headersSent) return;
      res.setHeader('connection', 'close');
      res.once('finish', () => req.socket.destroySoon());
      refuseBody(
        req,
        res,
        new Problem(408, 'request-timeout', 'Request timeout', `the request body did not arrive within ${ms / 1000} s`),
        JSON_RPC_CODE.transport,
      );
    }, ms);
    const clear = () => clearTimeout(timer);
    req.once('end', clear);
    req.once('close', clear);
    res.once('close', clear);
    next();
  };
}

/** body-parser's `verify`: bytes that are not UTF-8 are refused, instead of being read as U+FFFD and stored. */
export function requireUtf8(_req: Request, _res: Response, body: Buffer): void {
  if (!isUtf8(body)) {
    throw Object.assign(new Error('the body is not valid UTF-8'), { status: 400, type: 'entity.utf8.invalid' });
  }
}

/**
 * body-parser's `verify`, after requireUtf8: what the text says that the parsed value would hide (see rawJsonIssue) —
 * a member named twice in one object, a number JSON.parse would round.
 */
export function rejectAmbiguousJson(_req: Request, _res: Response, body: Buffer): void {
  const issue = rawJsonIssue(body.toString('utf8'));
  if (issue) {
    const said = issue.rule === 'duplicate_key' ? 'is given twice' : 'holds a number a double cannot keep exactly';
    throw Object.assign(new Error(`${issue.field} ${said}`), {
      status: 400,
      type: issue.rule === 'duplicate_key' ? 'entity.duplicate.key' : 'entity.inexact.number',
      field: issue.field,
    });
  }
}

/** Every check body-parser's `verify` makes of the raw bytes, in order. */
export function verifyJsonBytes(req: Request, res: Response, body: Buffer): void {
  markEmptyBody(req, body);
  requireUtf8(req, res, body);
  rejectAmbiguousJson(req, res, body);
}

/** After the JSON parser: what no request may carry anywhere in its body (see jsonInputIssues). */
export function rejectUnsafeJson(req: Request, res: Response, next: NextFunction): void {
  const body: unknown = req.body;
  if (body === null || typeof body !== 'object') {
    next();
    return;
  }
  const errors = jsonInputIssues(body);
  if (errors.length > 0) {
    // Valid JSON, so on the MCP endpoint no Parse error: a message no method may receive.
    refuseBody(req, res, Problem.validation(errors), JSON_RPC_CODE.invalidRequest, body);
    return;
  }
  next();
}
