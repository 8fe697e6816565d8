import { createHash, timingSafeEqual } from 'node:crypto';
import { IncomingMessage, Server, ServerResponse, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { AuthFailureLimiter } from './auth-failures';
import {
  type ClientErrorCode,
  answerClientErrors,
  missingHost,
  originForm,
  repeatedHeader,
  unservedTarget,
} from './client-errors';
import type { VerityConfig } from './config';
import { metricsRegistry } from './metrics';
import { textIssue } from './text-issue';

/**
 * Does this bearer token open /metrics? Compared as digests in constant time: the answer's timing says nothing about
 * how much of the token matched. (The API also lets an operator key in; the workers know only METRICS_TOKEN.)
 */
export function isMetricsToken(config: Pick<VerityConfig, 'METRICS_TOKEN'>, token: string | null): boolean {
  const expected = config.METRICS_TOKEN;
  if (!expected || !token) return false;
  const digest = (v: string) => createHash('sha256').update(v).digest();
  return timingSafeEqual(digest(token), digest(expected));
}

export interface OpsServerOptions {
  port: number;
  host: string;
  config: Pick<VerityConfig, 'METRICS_TOKEN' | 'METRICS_PUBLIC'>;
  logger: Logger;
  /** Readiness: each dependency's probe (resolves when it answers). */
  probes: Record<string, () => Promise<unknown>>;
  /**
   * The failed authentications of each client address, as the API counts them (and in the same count, in Redis): a
   * wrong METRICS_TOKEN is one, and an address that has used its failures is refused 429, the right token included.
   */
  failures: AuthFailureLimiter;
  /** Refreshes what is read at scrape time (queue depth); a failure leaves those gauges as they were. */
  beforeScrape?: () => Promise<void>;
}

export interface OpsServer {
  readonly port: number;
  close(): Promise<void>;
}

const PROBE_TIMEOUT_MS = 1500;

/** The methods served on this port: what `OPTIONS *` (the server as a whole) is answered with. */
const OPS_SERVER_METHODS = 'GET, HEAD, OPTIONS';

/**
 * A probe or a scrape sends its headers at once. A client that holds them back is hung up on after this long (408),
 * not Node's default minute: slow-headers connections cannot pile up on a worker's port (file descriptors it needs for
 * Postgres, Redis and the providers).
 */
export const OPS_HEADERS_TIMEOUT_MS = 5_000;

/**
 * Connections held at once: Prometheus and a probe or two need a handful. Beyond this a connection is closed as it
 * arrives, so a client that opens many (and keeps them alive) cannot take the descriptors the worker's jobs need.
 */
export const OPS_MAX_CONNECTIONS = 64;

/**
 * The HTTP face of a worker (dispatcher, reconciler), on a port of its own: `/health/live`, `/health/ready` (the same
 * answers as the API's) and `/metrics` (the same protection: METRICS_TOKEN as a bearer token, unless METRICS_PUBLIC,
 * and the same limit on failed authentications).
 * Nothing else is served.
 */
export async function startOpsServer(options: OpsServerOptions): Promise<OpsServer> {
  const readiness = singleFlight(() => checkReadiness(options.probes));
  const server = createServer(
    // Node checks the timeouts every connectionsCheckingInterval (30 s by default): once a second here.
    {
      headersTimeout: OPS_HEADERS_TIMEOUT_MS,
      requestTimeout: 2 * OPS_HEADERS_TIMEOUT_MS,
      connectionsCheckingInterval: 1000,
    },
    (req, res) => {
      const malformed = missingHost(req) ?? repeatedHeader(req);
      if (malformed) {
        const { status, code, title, detail } = malformed;
        problem(res, status, code, title, detail, { connection: 'close' });
        return;
      }
      // The request target as the API checks it: `*` with another method than OPTIONS, or an absolute URL naming
      // another host than Host, is a 400; `OPTIONS *` asks about the server (RFC 9110, section 9.3.7).
      const unserved = unservedTarget(req);
      if (unserved) {
        const { status, code, title, detail } = unserved;
        problem(res, status, code, title, detail);
        return;
      }
      if (req.url === '*') {
        res.writeHead(204, { allow: OPS_SERVER_METHODS }).end();
        return;
      }
      handle(options, readiness, req, res).catch((error: unknown) => {
        options.logger.warn({ err: error }, 'ops endpoint failed');
        if (res.headersSent) res.end();
        else problem(res, 500, 'internal', 'Internal error', 'the worker could not answer; see its log');
      });
    },
  );
  server.keepAliveTimeout = 65_000;
  server.maxConnections = OPS_MAX_CONNECTIONS;
  // What Node's parser refuses (a malformed request, headers too large or too slow, an unmet Expect, a CONNECT, no
  // Host) got Node's bare status line with no body, or no answer at all: answered as the API answers it.
  answerClientErrors(server, options.logger);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  // A worker knows no API keys: without a token (or METRICS_PUBLIC) every scrape is 401, and nothing else said why.
  if (options.config.METRICS_PUBLIC !== true && options.config.METRICS_TOKEN === undefined) {
    options.logger.warn(
      { port },
      '/metrics on this port answers nobody: set METRICS_TOKEN (or METRICS_PUBLIC=true); a worker takes no API key',
    );
  }
  return { port, close: () => closeServer(server) };
}

interface Readiness {
  ok: boolean;
  checks: Record<string, 'up' | 'down'>;
}

/**
 * The `detail` of a `503 not-ready` problem, the same on the API and the workers: the dependencies that are down, by
 * name (`not ready: redis, schema are down`). The checks themselves travel as the problem's `checks` member.
 */
export function notReadyDetail(checks: Record<string, string>): string {
  const down = Object.keys(checks).filter((name) => checks[name] !== 'up');
  return `not ready: ${down.join(', ')} ${down.length > 1 ? 'are' : 'is'} down`;
}

/**
 * `fn`, run once for any number of concurrent callers: while a call is in flight, callers get its answer. Readiness
 * is unauthenticated, and each check takes a connection from the worker's Postgres pool: a flood of probes must not
 * queue ahead of the jobs' statements (which give up after the pool's connection timeout).
 */
export function singleFlight<T>(fn: () => Promise<T>): () => Promise<T> {
  let inFlight: Promise<T> | null = null;
  return () => {
    inFlight ??= fn().finally(() => {
      inFlight = null;
    });
    return inFlight;
  };
}

async function checkReadiness(probes: OpsServerOptions['probes']): Promise<Readiness> {
  const names = Object.keys(probes);
  const results = await Promise.all(names.map((name) => probe(probes[name])));
  return {
    ok: results.every((r) => r === 'up'),
    checks: Object.fromEntries(names.map((name, i) => [name, results[i]])),
  };
}

async function handle(
  options: OpsServerOptions,
  readiness: () => Promise<Readiness>,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  // An absolute-form target (`GET http://host/metrics`) names the same path as its origin form.
  const [path, query = ''] = splitUrl(originForm(req.url ?? '/'));
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    problem(res, 405, 'method-not-allowed', 'Method not allowed', 'only GET and HEAD are served here', {
      allow: 'GET, HEAD',
    });
    return;
  }
  const isProbe = path === '/health/live' || path === '/health/ready';
  if (isProbe && (refusedQuery(res, query) || (await refusedBody(req, res, path)))) return;
  if (path === '/health/live') {
    json(res, 200, { status: 'ok' });
    return;
  }
  if (path === '/health/ready') {
    const { ok, checks } = await readiness();
    // Not ready is an error answer like every other: problem+json, the checks a member of it.
    if (ok) json(res, 200, { status: 'ok', checks });
    else problem(res, 503, 'not-ready', 'Not ready', notReadyDetail(checks), {}, { checks });
    return;
  }
  if (path === '/metrics') {
    if (options.config.METRICS_PUBLIC !== true && !(await authenticated(options, req, res))) return;
    if (refusedQuery(res, query) || (await refusedBody(req, res, path))) return;
    await options.beforeScrape?.().catch((error: unknown) => {
      options.logger.warn({ err: error }, 'scrape: could not refresh queue gauges');
    });
    const body = await metricsRegistry.metrics();
    res.writeHead(200, { 'content-type': metricsRegistry.contentType }).end(body);
    return;
  }
  problem(res, 404, 'not-found', 'Not found', 'served here: /health/live, /health/ready and /metrics');
}

/**
 * Whether the request carries METRICS_TOKEN; if not, it has been answered. A token is a guess like an API key is on the
 * API: checked under a reservation of the address' failed authentications (AuthFailureLimiter.reserve, checked and
 * counted in one step), a wrong one is a failure, and once the address has used its failures the right one is refused
 * as a wrong one is (429), or the limit would confirm a guess. A request with no token guesses nothing: 401, not counted.
 */
async function authenticated(options: OpsServerOptions, req: IncomingMessage, res: ServerResponse): Promise<boolean> {
  const header = req.headers.authorization ?? '';
  const token = /^Bearer\s+(\S+)$/i.exec(header)?.[1] ?? null;
  const unauthorized = () =>
    problem(res, 401, 'unauthorized', 'Unauthorized', 'send METRICS_TOKEN as a bearer token', {
      'www-authenticate': 'Bearer',
    });
  if (token === null) {
    unauthorized();
    return false;
  }
  const address = req.socket.remoteAddress ?? '';
  const reservation = await options.failures.reserve(address);
  if (reservation.kind === 'blocked') {
    problem(
      res,
      429,
      'too-many-failed-authentications',
      'Too many failed authentications',
      `too many wrong tokens or unknown keys from this address; retry in ${reservation.seconds} s`,
      { 'retry-after': `${reservation.seconds}` },
    );
    return false;
  }
  if (reservation.kind === 'busy') {
    problem(
      res,
      429,
      'rate-limited',
      'Too many keys checked at once',
      'more keys from this address are being checked at once than it may have checked at one time; retry in 1 s',
      { 'retry-after': '1' },
    );
    return false;
  }
  const right = isMetricsToken(options.config, token);
  await options.failures.settle(address, right);
  if (!right) unauthorized();
  return right;
}

function splitUrl(url: string): [string, string?] {
  const at = url.indexOf('?');
  return at < 0 ? [url] : [url.slice(0, at), url.slice(at + 1)];
}

/**
 * These paths take no query parameters, as on the API (`RefuseUnreadQuery`): `/health/ready?verbose=1` would answer as
 * if a detail had been given. Each parameter named is a 400 `unknown_field` (`no_control_characters` for a name the API
 * would refuse for that), written as the API writes it; an empty query (`?`, `?&`) names none. True when refused.
 */
function refusedQuery(res: ServerResponse, query: string): boolean {
  const names = [...new Set(new URLSearchParams(query).keys())];
  if (names.length === 0) return false;
  const errors = names.map((name) => {
    const field = name === '' ? '[""]' : name;
    const issue = textIssue(name);
    return issue
      ? { field, ...issue }
      : {
          field,
          rule: 'unknown_field',
          message: `unknown query parameter "${name}": this endpoint takes none (unknown fields are rejected, not ignored)`,
        };
  });
  const more = errors.length > 1 ? ` (and ${errors.length - 1} more)` : '';
  problem(
    res,
    400,
    'validation-error',
    'The request is invalid',
    `${errors[0].field}: ${errors[0].message}${more}`,
    {},
    {
      errors,
    },
  );
  return true;
}

/**
 * Nothing here reads a body, as no GET of the API does (`RefuseUnreadBody`): `GET /health/ready` with
 * `{"verbose":true}` answered 200 as if the member had been read. A body is a 400 `no_body`, written as the API writes
 * it; an empty one (a chunked body with no byte) is none. It is read to its end first, so the answer is not cut short
 * by a client still sending it (the request timeout bounds how long that can take). True when refused.
 */
async function refusedBody(req: IncomingMessage, res: ServerResponse, path: string): Promise<boolean> {
  if ((await bodyLength(req)) === 0) return false;
  const message = `${req.method} ${path} takes no body`;
  problem(
    res,
    400,
    'validation-error',
    'The request is invalid',
    `(body): ${message}`,
    {},
    {
      errors: [{ field: '(body)', rule: 'no_body', message }],
    },
  );
  return true;
}

function bodyLength(req: IncomingMessage): Promise<number> {
  if (req.readableEnded) return Promise.resolve(0);
  return new Promise((resolve) => {
    let length = 0;
    req.on('data', (chunk: Buffer) => (length += chunk.length));
    req.once('end', () => resolve(length));
    // Gone before its end: nothing will read the answer.
    req.once('close', () => resolve(length));
  });
}

async function probe(check: () => Promise<unknown>): Promise<'up' | 'down'> {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      check(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error('timeout')), PROBE_TIMEOUT_MS);
      }),
    ]);
    return 'up';
  } catch {
    return 'down';
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A refusal as the API answers one (RFC 9457 problem+json, the API's problem `type` URLs): a client of the workers'
 * port — Prometheus, a probe, anyone who reaches it — reads the same shape it reads from the API.
 */
function problem(
  res: ServerResponse,
  status: number,
  code:
    | 'validation-error'
    | 'unauthorized'
    | 'not-found'
    | 'method-not-allowed'
    | 'not-ready'
    | 'too-many-failed-authentications'
    | 'rate-limited'
    | 'internal'
    | ClientErrorCode,
  title: string,
  detail: string,
  headers: Record<string, string> = {},
  members: Record<string, unknown> = {},
): void {
  const body = JSON.stringify({ ...members, type: `https://verity.dev/problems/${code}`, title, status, detail });
  res
    .writeHead(status, {
      ...headers,
      'content-type': 'application/problem+json; charset=utf-8',
      'content-length': Buffer.byteLength(body),
    })
    .end(body);
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify(body));
}

/**
 * Stops listening and ends every connection: idle keep-alive ones (a scraper's) and those in the middle of a request.
 * A probe or a scrape cut short is simply retried; a client that sends its headers slowly (or never finishes them)
 * would otherwise hold `close()` until Node's headers timeout, past the shutdown deadline, and the workers, which
 * close after this server, would never drain their active jobs.
 */
function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}
