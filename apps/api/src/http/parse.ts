import { createParamDecorator, type ExecutionContext } from '@nestjs/common';
import { newId } from '@verity/platform';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { NextFunction, Request, Response } from 'express';
import { z } from 'zod';
import { zodErrors } from '../executions/submission';
import { Problem } from '../problem/problem';

export function parseBody<T extends z.ZodType>(schema: T, body: unknown): z.infer<T> {
  const parsed = schema.safeParse(body);
  if (!parsed.success) throw Problem.validation(zodErrors(parsed.error));
  return parsed.data;
}

/**
 * A query string's parameters. An empty value of a parameter the endpoint takes (`?status=&limit=`) is that parameter
 * left out, as a form or a URL template leaves it — refused as a value, it turned the documented
 * `?status=&cursor=&limit=` into a 400. Only exactly empty: a blank or a name the endpoint does not take (a typo) is
 * judged by `schema` as before. A parameter the endpoint takes, given more than once (an array), is refused as such
 * (`single_value`): judged by `schema`, `?status=completed&status=failed` was told that `status` must be one of a list
 * holding both values, and `?limit=1&limit=2` that it "received array".
 */
export function parseQuery<T extends z.ZodObject>(schema: T, query: unknown): z.infer<T> {
  const names = Object.keys(schema.shape);
  if (typeof query === 'object' && query !== null) {
    const repeated = Object.entries(query).filter(([name, value]) => Array.isArray(value) && names.includes(name));
    if (repeated.length > 0) {
      throw Problem.validation(
        repeated.map(([field]) => ({ field, rule: 'single_value', message: 'given more than once: give it once' })),
      );
    }
  }
  return parseBody(schema, withoutEmptyValues(query, names));
}

function withoutEmptyValues(query: unknown, names: readonly string[]): unknown {
  if (typeof query !== 'object' || query === null || Array.isArray(query)) return query;
  return Object.fromEntries(Object.entries(query).filter(([name, value]) => !(value === '' && names.includes(name))));
}

/**
 * A page size in a query string: decimal digits only — `0x10`, `1e2`, `+5` or ` 5`, which a number coercion would take,
 * are refused — within [1, max]; `fallback` when absent.
 */
export function pageLimit(max: number, fallback: number) {
  return z
    .string()
    .regex(/^[0-9]{1,9}$/, `a whole number from 1 to ${max}, in decimal digits`)
    .transform(Number)
    .pipe(z.number().int().min(1).max(max))
    .default(fallback);
}

/** The page size of a cursor-paged list: at most 200, 50 when not given (ApiPageQuery documents it). */
export const PAGE_SIZE = { max: 200, default: 50 } as const;

/**
 * The stored text a page of executions may hold (with their operations): a page ends before its `limit` once the next
 * execution would pass it, and always holds one. Counted by `limit` alone, 200 executions as large as the body limit
 * lets them be made a page of 50 MB, and three at once ran the API out of its heap for every tenant.
 */
export const PAGE_BYTES = 1024 * 1024;

/**
 * The query parameters of a cursor-paged list: `cursor`, the `next_cursor` of the page before (an id of
 * the listed kind, `exe_…`), and `limit` (PAGE_SIZE).
 */
export function cursorPageQuery(idPrefix: Parameters<typeof newId>[0]) {
  return {
    cursor: z
      .string()
      .regex(new RegExp(`^${idPrefix}_[0-9a-z]{1,40}$`), 'a next_cursor value from a previous page')
      .optional(),
    limit: pageLimit(PAGE_SIZE.max, PAGE_SIZE.default),
  };
}

/**
 * The media types the JSON parser reads (main.ts: `application/json`, `application/*+json`), parameters aside. Not
 * `json\b`: `application/json-seq` or a list (`application/json, text/plain`) passed it while the parser left the body
 * unread, and the caller was told its body was missing. The subtype is one the parser takes as one (RFC 6838, as
 * media-typer reads it): a letter or digit first, at most 127 characters — `application/+json` passed too.
 */
export const JSON_MEDIA_TYPE =
  /^application\/(?=[a-z0-9][a-z0-9!#$&^_.+-]{0,126}[ \t]*(?:;|$))(?:[a-z0-9!#$&^_.+-]*\+)?json[ \t]*(?:;|$)/i;

/** A body must say it is JSON; anything else is refused before it is read as one. */
export function requireJson(req: Request): void {
  const type = req.headers['content-type'] ?? '';
  if (!JSON_MEDIA_TYPE.test(type)) {
    throw new Problem(415, 'unsupported-media-type', 'Unsupported media type', 'send Content-Type: application/json');
  }
}

const ParsedJsonBody = createParamDecorator(({ schema }: { schema: z.ZodType }, ctx: ExecutionContext): unknown => {
  const req = ctx.switchToHttp().getRequest<Request>();
  requireJson(req);
  return parseBody(schema, req.body);
});

/**
 * A handler's parameter: the request's body, which must say it is JSON (else 415) and must match `schema` (else 400
 * naming each field). The route still documents the body itself (ApiEndpoint's `body`).
 */
export function JsonBody(schema: z.ZodType): ParameterDecorator {
  // Wrapped: Nest takes a decorator argument with a `transform` method (as a zod schema has) for a pipe.
  const parsed = ParsedJsonBody({ schema });
  return (target, key, index) => {
    parsed(target, key, index);
    // Marked on the handler, so RefuseUnreadBody (no-body.ts) knows this route reads its body.
    if (key !== undefined) Reflect.defineMetadata(READS_JSON_BODY, true, (target as Record<PropertyKey, object>)[key]);
  };
}

/** Metadata on a handler whose body is read through JsonBody. */
export const READS_JSON_BODY = 'verity:reads-json-body';

/** Requests sent chunked whose body ended without a byte (settleChunkedBody, or the JSON parser: markEmptyBody). */
const emptyChunkedBodies = new WeakSet<IncomingMessage>();

/** body-parser's `verify` saw the body end without a byte (it then hands on `{}`, as if `{}` had been sent). */
export function markEmptyBody(req: IncomingMessage, body: Buffer): void {
  if (body.length === 0) emptyChunkedBodies.add(req);
}

/** Whether the body was read and held no byte (the JSON parser's `{}` for it is no `{}` the caller sent). */
export function bodyWasEmpty(req: IncomingMessage): boolean {
  return emptyChunkedBodies.has(req);
}

/**
 * For endpoints whose body is optional: no body at all, or an empty object, means "none". A chunked body is one
 * once a byte of it arrived: a client that streams its body and has nothing to send ends it at once ("0").
 */
export function hasBody(req: IncomingMessage): boolean {
  if (emptyChunkedBodies.has(req)) return false;
  const length = Number(req.headers['content-length'] ?? 0);
  return length > 0 || req.headers['transfer-encoding'] !== undefined;
}

/** Requests whose body only the server's own checks have read so far: no route has begun (see answerClientErrors). */
const bodiesUnread = new WeakSet<IncomingMessage>();

/**
 * Middleware before the body checks: a request with a body is marked as one nothing has acted on. A body whose framing
 * breaks while it is so marked (a chunk size that is no hexadecimal number) is answered 400 on its own response,
 * instead of having its connection cut without a word.
 */
export function markBodyUnread(req: Request, _res: Response, next: NextFunction): void {
  if (hasBody(req)) bodiesUnread.add(req);
  next();
}

/** Middleware after the body checks: from here on a route may act on the request. */
export function handOnBody(req: Request, _res: Response, next: NextFunction): void {
  bodiesUnread.delete(req);
  next();
}

/** Whether the request `res` answers is still marked by markBodyUnread. */
export function bodyUnread(res: ServerResponse): boolean {
  return bodiesUnread.has(res.req);
}

/**
 * Middleware after the JSON parser: a body sent chunked that the parser did not read (not labelled JSON, or not at
 * all) is waited for until its first byte or its end, so `hasBody` knows whether there is one. Counted by its header
 * alone, an empty one made `POST …/recheck` and `…/retry` answer 400 `no_body`, and a cancel 415, to a caller that
 * sent nothing. A first byte is put back (the stream is as it was); a body that never ends is bodyReadTimeout's 408.
 */
export function settleChunkedBody(req: Request, _res: Response, next: NextFunction): void {
  if (req.body !== undefined || req.headers['transfer-encoding'] === undefined || req.readableEnded) {
    next();
    return;
  }
  const done = () => {
    req.off('data', onData);
    req.off('end', onEnd);
    req.off('close', done);
  };
  const onData = (chunk: Buffer) => {
    done();
    req.pause();
    req.unshift(chunk);
    next();
  };
  const onEnd = () => {
    done();
    emptyChunkedBodies.add(req);
    next();
  };
  req.on('data', onData);
  req.once('end', onEnd);
  // Answered already (408) or gone: nothing to go on with.
  req.once('close', done);
}

/**
 * For endpoints that take no body: none at all, or an empty object, passes; anything else is refused. A body the JSON
 * parser did not read (`body` undefined: sent as `text/plain`, form data, or with no Content-Type) is a body too — the
 * caller's `dry_run=true` must not be ignored because of how it was labelled.
 */
export function refuseBody(req: Request, body: unknown, endpoint: string): void {
  const empty = typeof body === 'object' && body !== null && !Array.isArray(body) && Object.keys(body).length === 0;
  if (hasBody(req) && !empty) {
    throw Problem.validation([{ field: '(body)', rule: 'no_body', message: `${endpoint} takes no body` }]);
  }
}

/** Stripe's and the IETF draft's bound; printable ASCII so it can be logged and compared byte for byte. */
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

/**
 * The request's Idempotency-Key (undefined without one), or 400 naming the header. Read from the request, not with
 * @Headers(): that decorator would document a second, required header.
 */
export function idempotencyKeyOf(req: Request): string | undefined {
  const header = req.headers['idempotency-key'];
  const key = Array.isArray(header) ? header.join(', ') : header;
  if (key !== undefined && !IDEMPOTENCY_KEY.test(key)) {
    throw Problem.validation([
      { field: 'Idempotency-Key', rule: 'format', message: '1 to 255 printable ASCII characters without spaces' },
    ]);
  }
  return key;
}
