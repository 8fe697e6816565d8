import { randomUUID } from 'node:crypto';
import { type IncomingMessage, STATUS_CODES, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';

/** The problem codes a refusal of the HTTP layer answers with (the API's ProblemCode has them all). */
export type ClientErrorCode = 'bad-request' | 'request-timeout';

export interface ClientErrorAnswer {
  status: number;
  code: ClientErrorCode;
  title: string;
  detail: string;
}

/** The parser's codes Node answers with a status of its own; every other refusal is a 400 (see clientErrorAnswer). */
const ANSWER_OF_PARSER_CODE = new Map<string, ClientErrorAnswer>([
  [
    'HPE_HEADER_OVERFLOW',
    {
      status: 431,
      code: 'bad-request',
      title: 'Request header fields too large',
      detail: 'the request line and headers together must stay under 16 KiB',
    },
  ],
  [
    'ERR_HTTP_REQUEST_TIMEOUT',
    { status: 408, code: 'request-timeout', title: 'Request timeout', detail: 'the request did not arrive in time' },
  ],
]);

/** A 400 for a request that is no well-formed HTTP; `detail` says what is wrong with it. */
function malformedRequest(detail: string): ClientErrorAnswer {
  return { status: 400, code: 'bad-request', title: 'Malformed HTTP request', detail };
}

const MALFORMED_REQUEST: ClientErrorAnswer = malformedRequest(
  'the request is not well-formed HTTP/1.1: a byte HTTP does not allow in the request line or a header ' +
    '(percent-encode it), or a body whose framing cannot be read',
);

/** What Node's HTTP parser refused, as the problem Verity answers (Node's own statuses: 431, 408, else 400). */
export function clientErrorAnswer(errorCode: string | undefined): ClientErrorAnswer {
  return (errorCode !== undefined && ANSWER_OF_PARSER_CODE.get(errorCode)) || MALFORMED_REQUEST;
}

/** `Expect` with anything but `100-continue`: Node's own answer is a bare 417 with no body. */
const EXPECTATION_FAILED: ClientErrorAnswer = {
  status: 417,
  code: 'bad-request',
  title: 'Expectation failed',
  detail: 'the only expectation this server meets is Expect: 100-continue',
};

/** CONNECT: this server is no proxy. Node closes such a connection without a word. */
const NO_TUNNEL: ClientErrorAnswer = malformedRequest('CONNECT is not served here: this server is no proxy');

/**
 * What every answer of a Verity HTTP server says, whatever wrote it: no content sniffing. A browser that sniffs a JSON
 * or problem answer holding a caller's text (an agent id, an intent, a URL) may run it as HTML or script. The API sets
 * it on every answer in its first express layer (answerHeaders); the answers written here, outside express, carry it
 * too.
 */
export const EVERY_ANSWER_HEADERS: Readonly<Record<string, string>> = { 'x-content-type-options': 'nosniff' };

/** The problem document of an answer given outside express. */
function clientErrorBody(answer: ClientErrorAnswer): string {
  return JSON.stringify({
    type: `https://verity.dev/problems/${answer.code}`,
    title: answer.title,
    status: answer.status,
    detail: answer.detail,
  });
}

/** The whole response, as bytes for the socket: there is no request or response object to answer through. */
export function clientErrorResponse(answer: ClientErrorAnswer, requestId: string): string {
  const body = clientErrorBody(answer);
  return [
    `HTTP/1.1 ${answer.status} ${STATUS_CODES[answer.status] ?? 'Error'}`,
    'content-type: application/problem+json; charset=utf-8',
    ...Object.entries(EVERY_ANSWER_HEADERS).map(([name, value]) => `${name}: ${value}`),
    `content-length: ${Buffer.byteLength(body)}`,
    `x-request-id: ${requestId}`,
    'connection: close',
    '',
    body,
  ].join('\r\n');
}

/**
 * A request Node's HTTP parser refuses — a byte outside HTTP's grammar in the request line or a header, headers over
 * the size limit, a request that timed out — never reaches a handler, and Node's default answer is a bare status line
 * with no body. Answered here like every other refusal: problem+json with a request id (logged with the parser's
 * code, so the id a caller quotes can be found). The connection is closed: after a parse error nobody can tell where
 * the next request would begin.
 *
 * Not answered at all while a request on the same connection is still being handled (a pipelined request, or a
 * body whose framing broke after its route began): the refusal would read as that request's answer, though it may
 * have done what it asked. The connection is cut instead, and the caller knows only that it does not know.
 *
 * Except where `bodyUnread` says the request in flight is the one whose body broke, and that nothing has read it but
 * the server's own body checks (no route has begun): the refusal is then that request's true answer — a chunk size that
 * is no hexadecimal number, a chunk longer than its size says — and it is given on its response, with its request id.
 * Until 2026-12-07 such a request had its connection cut without a word, and its caller could not tell that nothing
 * had been carried out.
 */
export function answerClientErrors(
  server: Server,
  logger: Logger,
  options: { bodyUnread?: (res: ServerResponse) => boolean } = {},
): void {
  // Three requests Node answers itself, before any handler (no request id, no problem): answered here the same way.
  // An HTTP/1.1 request without Host got a bare 400 with no body: Node's check is turned off, and the server's handler
  // answers it instead (missingHost: the API's rejectMissingHost, the workers' ops server).
  (server as Server & { requireHostHeader: boolean }).requireHostHeader = false;
  server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
    const requestId = randomUUID();
    logger.debug({ requestId, expect: req.headers.expect, status: 417 }, 'request refused: unmet Expect');
    const body = clientErrorBody(EXPECTATION_FAILED);
    res.writeHead(417, {
      'content-type': 'application/problem+json; charset=utf-8',
      ...EVERY_ANSWER_HEADERS,
      'content-length': Buffer.byteLength(body),
      'x-request-id': requestId,
      connection: 'close',
    });
    res.end(body);
  });
  server.on('connect', (_req: IncomingMessage, socket: Duplex) => {
    const requestId = randomUUID();
    logger.debug({ requestId, status: 400 }, 'request refused: CONNECT');
    socket.end(clientErrorResponse(NO_TUNNEL, requestId));
    (socket as Duplex & { destroySoon?: () => void }).destroySoon?.();
  });
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Duplex) => {
    const inFlight = (socket as Duplex & { _httpMessage?: ServerResponse })._httpMessage;
    if (error.code === 'ECONNRESET' || !socket.writable) {
      socket.destroy();
      return;
    }
    if (inFlight) {
      if (!inFlight.headersSent && !inFlight.req.complete && options.bodyUnread?.(inFlight)) {
        answerInFlight(inFlight, clientErrorAnswer(error.code), error.code, logger);
        return;
      }
      socket.destroy();
      return;
    }
    const requestId = randomUUID();
    const answer = clientErrorAnswer(error.code);
    logger.debug({ requestId, code: error.code, status: answer.status }, 'request refused by the HTTP parser');
    socket.end(clientErrorResponse(answer, requestId));
    // http.Server sockets allow half-open connections: without this one would stay open until the client closed it.
    (socket as Duplex & { destroySoon?: () => void }).destroySoon?.();
  });
}

/** The refusal of a request whose body broke before anything read it, on its own response (answerClientErrors). */
function answerInFlight(
  res: ServerResponse,
  answer: ClientErrorAnswer,
  code: string | undefined,
  logger: Logger,
): void {
  const body = clientErrorBody(answer);
  logger.debug(
    { requestId: res.getHeader('x-request-id'), code, status: answer.status },
    'request refused by the HTTP parser: its body',
  );
  // `connection: close`: Node ends the connection once the answer is written; nobody can tell where the next request
  // would begin.
  res.writeHead(answer.status, {
    'content-type': 'application/problem+json; charset=utf-8',
    ...EVERY_ANSWER_HEADERS,
    'content-length': Buffer.byteLength(body),
    connection: 'close',
  });
  res.end(body);
}

/**
 * An HTTP/1.1 request must name its Host (RFC 9112 §3.2: a server answers 400 to one that does not). Node's own answer
 * is a bare 400 with no body; answerClientErrors turns that off, and a server that uses it answers this instead, as
 * every other refusal: problem+json, and the connection closed. HTTP/1.0 has no such rule.
 */
export function missingHost(req: IncomingMessage): ClientErrorAnswer | null {
  if (req.httpVersionMajor === 1 && req.httpVersionMinor >= 1 && req.headers.host === undefined) return MISSING_HOST;
  return null;
}

const MISSING_HOST: ClientErrorAnswer = malformedRequest(
  'an HTTP/1.1 request must carry a Host header (RFC 9112, section 3.2)',
);

/**
 * What a request's target may be besides a path (origin-form, `/…`): `*` with OPTIONS, which asks about the server
 * itself (RFC 9112, section 3.2.4), or an absolute http(s) URL naming the host Host names. With an absolute-form target
 * RFC 9112 (section 3.2.2) has the server take the host from the target and ignore Host; every check that reads the
 * host here reads Host (the published demo keys', Bull Board's same-origin check, express's own `req.hostname`).
 * Refusing a target that names another host keeps them all right, those to come included: where the request is served
 * the two agree. The answer to a target that is none of these, or null.
 */
export function unservedTarget(req: Pick<IncomingMessage, 'url' | 'method' | 'headers'>): ClientErrorAnswer | null {
  const target = req.url ?? '';
  if (target.startsWith('/')) return null;
  if (target === '*') return req.method === 'OPTIONS' ? null : ASTERISK_NOT_OPTIONS;
  let url: URL;
  try {
    url = new URL(target);
  } catch {
    return NO_TARGET;
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.username !== '' || url.password !== '') {
    return NO_TARGET;
  }
  const host = req.headers.host;
  if (host !== undefined && AUTHORITY.test(host)) {
    try {
      if (new URL(`${url.protocol}//${host}`).host === url.host) return null;
    } catch {
      // Not an authority: answered below.
    }
  }
  return {
    status: 400,
    code: 'bad-request',
    title: 'Request target and Host disagree',
    detail:
      `the request target names the host ${JSON.stringify(url.host.slice(0, 200))} and Host names ` +
      `${JSON.stringify((host ?? '').slice(0, 200))}: send the path alone (GET /v1/…), or the same host in both`,
  };
}

/**
 * The path and query a served request target names (unservedTarget let it through): an origin-form target as it is,
 * an absolute-form one (`http://host/metrics?x`) without its scheme and authority, as express's router reads it
 * (`http://host` alone is `/`). Taken from the target's text, not from a parsed URL, so that nothing in the path (dot
 * segments, percent-encoding) is rewritten on the way. `*` stays `*`.
 */
export function originForm(target: string): string {
  if (target.startsWith('/') || target === '*') return target;
  const authority = target.indexOf('//') + 2;
  const end = target.slice(authority).search(/[/?#]/);
  if (end < 0) return '/';
  const rest = target.slice(authority + end).replace(/#.*$/s, '');
  return rest.startsWith('/') ? rest : `/${rest}`;
}

/** A Host value: a name or IPv4 address, or a bracketed IPv6 address, and an optional port. */
const AUTHORITY = /^(?:\[[0-9a-fA-F:.]+\]|[^\s/?#@[\]:\\]+)(?::\d*)?$/;

const ASTERISK_NOT_OPTIONS: ClientErrorAnswer = malformedRequest(
  'the request target * (the server as a whole) is for OPTIONS only (RFC 9112, section 3.2.4)',
);

const NO_TARGET: ClientErrorAnswer = malformedRequest(
  'the request target must be a path beginning with /, an http or https URL without user information, or * ' +
    '(OPTIONS only)',
);

/**
 * Headers Node keeps only the first of when they come twice (it drops the rest without a word): the key a proxy or a
 * log took from the second `Authorization` would not be the one that acted, nor the second `Content-Type` the one the
 * body was read as. `Host` too: RFC 9112 (section 3.2) requires a 400 for a request with more than one.
 */
const SINGLE_HEADERS = new Set(['authorization', 'content-type', 'idempotency-key', 'host']);

/** The answer to a request that gives one of those headers twice (naming it), or null. */
export function repeatedHeader(req: Pick<IncomingMessage, 'rawHeaders'>): ClientErrorAnswer | null {
  const seen = new Set<string>();
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i].toLowerCase();
    if (!SINGLE_HEADERS.has(name)) continue;
    if (seen.has(name))
      return { status: 400, code: 'bad-request', title: 'Header given twice', detail: `${name} may be given once` };
    seen.add(name);
  }
  return null;
}
