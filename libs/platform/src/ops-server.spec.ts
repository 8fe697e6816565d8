import { Socket, connect } from 'node:net';
import pino from 'pino';
import { TEST_REDIS_URL, clearRedisPrefix, testQueuePrefix } from '../../../test/support/services';
import { AuthFailureLimiter } from './auth-failures';
import { originForm } from './client-errors';
import { queueJobs } from './metrics';
import { createRedis } from './redis';
import {
  OPS_HEADERS_TIMEOUT_MS,
  OPS_MAX_CONNECTIONS,
  OpsServer,
  isMetricsToken,
  singleFlight,
  startOpsServer,
} from './ops-server';

const TOKEN = 'a-metrics-token-of-some-length';

/** The failed-authentication count every server here shares (real Redis, a prefix of this file's own). */
const redis = createRedis(TEST_REDIS_URL, 'producer', 'ops-server-spec');
const prefix = testQueuePrefix('opsspec');
afterAll(async () => {
  await clearRedisPrefix(prefix);
  await redis.quit();
});

/** An ops server on a free port, metrics behind TOKEN, silent, with no probes unless given. */
function startOwnServer(options: Partial<Parameters<typeof startOpsServer>[0]> = {}): Promise<OpsServer> {
  return startOpsServer({
    port: 0,
    host: '127.0.0.1',
    config: { METRICS_TOKEN: TOKEN, METRICS_PUBLIC: undefined },
    logger: pino({ level: 'silent' }),
    probes: {},
    failures: new AuthFailureLimiter(redis, prefix, 1000),
    ...options,
  });
}

describe('the workers’ ops server', () => {
  let server: OpsServer;
  let base = '';
  let postgresUp = true;
  let refreshes = 0;

  beforeAll(async () => {
    server = await startOwnServer({
      probes: {
        postgres: () => (postgresUp ? Promise.resolve() : Promise.reject(new Error('down'))),
        redis: () => Promise.resolve('PONG'),
      },
      beforeScrape: () => {
        refreshes += 1;
        queueJobs.set({ queue: 'dispatch', state: 'waiting' }, refreshes);
        return refreshes === 2 ? Promise.reject(new Error('redis away')) : Promise.resolve();
      },
    });
    base = `http://127.0.0.1:${server.port}`;
  });
  afterAll(async () => server.close());

  const get = (path: string, token?: string) =>
    fetch(`${base}${path}`, { headers: token ? { authorization: `Bearer ${token}` } : {} });

  it('answers readiness with each dependency, 503 while one is down', async () => {
    expect(await (await get('/health/live')).json()).toEqual({ status: 'ok' });
    const ready = await get('/health/ready');
    expect([ready.status, await ready.json()]).toEqual([
      200,
      { status: 'ok', checks: { postgres: 'up', redis: 'up' } },
    ]);
    postgresUp = false;
    const down = await get('/health/ready');
    expect([down.status, down.headers.get('content-type'), await down.json()]).toEqual([
      503,
      'application/problem+json; charset=utf-8',
      {
        type: 'https://verity.dev/problems/not-ready',
        title: 'Not ready',
        status: 503,
        detail: 'not ready: postgres is down',
        checks: { postgres: 'down', redis: 'up' },
      },
    ]);
    postgresUp = true;
  });

  it('serves /metrics only to METRICS_TOKEN, refreshing the scrape-time gauges first (a failed refresh still answers)', async () => {
    expect((await get('/metrics')).status).toBe(401);
    expect((await get('/metrics', `${TOKEN}x`)).status).toBe(401);
    const first = await get('/metrics', TOKEN);
    expect(first.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(await first.text()).toMatch(/^verity_queue_jobs\{queue="dispatch",state="waiting"\} 1$/m);
    const second = await get('/metrics', TOKEN);
    expect(second.status).toBe(200);
    expect(refreshes).toBe(2);
  });

  it('serves nothing else', async () => {
    expect((await get('/')).status).toBe(404);
    // Hostile paths answer 404, never a 500 or another route: NUL, a lone surrogate, prototype keys, traversal.
    for (const path of [
      '/metrics%00',
      '/health/live%00',
      '/%ED%A0%80',
      '/__proto__',
      '/constructor',
      '/metrics/../metrics/x',
    ]) {
      expect({ path, status: (await get(path, TOKEN)).status }).toEqual({ path, status: 404 });
    }
    expect((await fetch(`${base}/metrics`, { method: 'POST' })).status).toBe(405);
  });

  it('answers its refusals as problem+json, as the API does (401 unauthorized, 404 not-found, 405 method-not-allowed)', async () => {
    const refusals: [Response, number, string][] = [
      [await get('/metrics'), 401, 'unauthorized'],
      [await get('/metrics', `${TOKEN}x`), 401, 'unauthorized'],
      [await get('/nothing'), 404, 'not-found'],
      [await fetch(`${base}/metrics`, { method: 'POST' }), 405, 'method-not-allowed'],
    ];
    for (const [res, status, code] of refusals) {
      expect(res.status).toBe(status);
      expect(res.headers.get('content-type')).toBe('application/problem+json; charset=utf-8');
      expect(await res.json()).toMatchObject({ type: `https://verity.dev/problems/${code}`, status });
    }
    expect(refusals[0][0].headers.get('www-authenticate')).toBe('Bearer');
    expect(refusals[3][0].headers.get('allow')).toBe('GET, HEAD');
  });

  it('refuses query parameters on the probes and, once the token was checked, on /metrics, as the API does (400 unknown_field)', async () => {
    // The API's probes and /metrics take none (`/health/ready?verbose=1` would answer as if a detail had been given);
    // a worker's port serves the same three paths and answers them the same way.
    for (const path of ['/health/live?x=1', '/health/ready?verbose=1', '/health/live?x', '/health/live?x=1&x=2']) {
      const res = await get(path);
      expect({ path, status: res.status, type: res.headers.get('content-type') }).toEqual({
        path,
        status: 400,
        type: 'application/problem+json; charset=utf-8',
      });
      const body = (await res.json()) as { type: string; status: number; errors: { field: string; rule: string }[] };
      expect(body).toMatchObject({ type: 'https://verity.dev/problems/validation-error', status: 400 });
      expect(body.errors.map((e) => [e.field, e.rule])).toEqual([
        [path.includes('verbose') ? 'verbose' : 'x', 'unknown_field'],
      ]);
    }
    const two = (await (await get('/health/live?a=1&b=2')).json()) as { errors: { field: string }[] };
    expect(two.errors.map((e) => e.field)).toEqual(['a', 'b']);
    const unnamed = (await (await get('/health/live?=1')).json()) as { errors: { field: string }[] };
    expect(unnamed.errors.map((e) => e.field)).toEqual(['[""]']);
    const nul = (await (await get('/health/live?a%00=1')).json()) as { errors: { rule: string }[] };
    expect(nul.errors.map((e) => e.rule)).toEqual(['no_control_characters']);
    // /metrics checks the token first: without it the answer stays 401, and says nothing about the parameters.
    expect((await get('/metrics?x=1')).status).toBe(401);
    const scrape = await get('/metrics?x=1', TOKEN);
    expect(scrape.status).toBe(400);
    expect(((await scrape.json()) as { errors: { field: string; rule: string }[] }).errors).toMatchObject([
      { field: 'x', rule: 'unknown_field' },
    ]);
    // No parameter, or an empty query (`?`, `?&`), is no parameter.
    for (const path of ['/health/live?', '/health/live?&', '/health/ready?'])
      expect((await get(path)).status).toBe(200);
    expect((await get('/metrics?', TOKEN)).status).toBe(200);
  });

  // `GET /health/ready` with `{"verbose":true}` answered 200 as if the member had been read (the API refuses a body on
  // a read: 400 no_body); an empty chunked body is no body.
  it('refuses a body on the probes and, once the token was checked, on /metrics, as the API does (400 no_body)', async () => {
    for (const [path, body, token] of [
      ['/health/live', '{"verbose":true}', undefined],
      ['/health/ready', '[]', undefined],
      ['/metrics', 'x', TOKEN],
    ] as const) {
      const request = `GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n${token ? `Authorization: Bearer ${token}\r\n` : ''}Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
      const { head, body: answer } = await rawAnswer(request);
      expect({ path, head: head.split('\r\n')[0] }).toEqual({ path, head: 'HTTP/1.1 400 Bad Request' });
      expect(head).toMatch(/^content-type: application\/problem\+json; charset=utf-8$/im);
      expect(JSON.parse(answer)).toMatchObject({
        type: 'https://verity.dev/problems/validation-error',
        status: 400,
        errors: [{ field: '(body)', rule: 'no_body', message: `GET ${path} takes no body` }],
      });
    }
    // /metrics checks the token first: without it the answer stays 401.
    const unauthorised = await rawAnswer(
      'GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}',
    );
    expect(unauthorised.head).toMatch(/^HTTP\/1\.1 401 /);
    // A chunked body with no byte is none.
    const empty = await rawAnswer(
      'GET /health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
    );
    expect(empty.head).toMatch(/^HTTP\/1\.1 200 /);
  });

  /** Bytes on a fresh connection, and everything the server answered until it closed the connection. */
  function rawAnswer(text: string): Promise<{ head: string; body: string }> {
    return new Promise((resolve, reject) => {
      const socket = connect(server.port, '127.0.0.1');
      const chunks: Buffer[] = [];
      socket.on('data', (chunk: Buffer) => chunks.push(chunk));
      socket.on('error', reject);
      socket.on('close', () => {
        const raw = Buffer.concat(chunks).toString('latin1');
        const at = raw.indexOf('\r\n\r\n');
        resolve(at < 0 ? { head: raw, body: '' } : { head: raw.slice(0, at), body: raw.slice(at + 4) });
      });
      // Not half-closed: a server that answers a refusal and closes must do so with the connection still open.
      socket.write(text);
    });
  }

  // Node answered these itself: a bare status line and no body (or, for CONNECT, nothing at all). A client of the
  // workers' port reads the API's answer to each: problem+json, the connection closed.
  it.each([
    [
      'a byte HTTP does not allow in the request line',
      'GET /health/\x01live HTTP/1.1\r\nHost: x\r\n\r\n',
      400,
      'bad-request',
    ],
    ['a NUL in a header value', 'GET /health/live HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n', 400, 'bad-request'],
    [
      'two Content-Lengths',
      'GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab',
      400,
      'bad-request',
    ],
    [
      'headers over 16 KiB',
      `GET /health/live HTTP/1.1\r\nHost: x\r\nX-A: ${'a'.repeat(20_000)}\r\n\r\n`,
      431,
      'bad-request',
    ],
    ['an HTTP/1.1 request without Host', 'GET /health/live HTTP/1.1\r\n\r\n', 400, 'bad-request'],
    [
      'an Expect other than 100-continue',
      'GET /health/live HTTP/1.1\r\nHost: x\r\nExpect: x\r\n\r\n',
      417,
      'bad-request',
    ],
    ['a CONNECT', 'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n', 400, 'bad-request'],
  ])('answers %s as the API does: problem+json, connection closed', async (_name, request, status, code) => {
    const { head, body } = await rawAnswer(request);
    expect(head).toMatch(new RegExp(`^HTTP/1\\.1 ${status} `));
    expect(head).toMatch(/^content-type: application\/problem\+json; charset=utf-8$/im);
    expect(head).toMatch(/^connection: close$/im);
    expect(JSON.parse(body)).toMatchObject({ type: `https://verity.dev/problems/${code}`, status });
  });

  // Node keeps the first of two and drops the second without a word: a proxy or a log that took the other would not
  // have seen the token (or the host) that was answered. The API refuses them (400 "Header given twice"); so does this.
  it.each([
    ['the token, then another', `Authorization: Bearer ${TOKEN}\r\nAuthorization: Bearer nope`],
    ['another, then the token', `Authorization: Bearer nope\r\nAuthorization: Bearer ${TOKEN}`],
    ['two Host headers', `Host: y\r\nAuthorization: Bearer ${TOKEN}`],
  ])('refuses a header given twice (%s) as the API does: 400 bad-request naming it', async (_name, headers) => {
    const { head, body } = await rawAnswer(
      `GET /metrics HTTP/1.1\r\nHost: x\r\n${headers}\r\nConnection: close\r\n\r\n`,
    );
    expect(head).toMatch(/^HTTP\/1\.1 400 /);
    expect(head).toMatch(/^content-type: application\/problem\+json; charset=utf-8$/im);
    const problem = JSON.parse(body) as { type: string; detail: string };
    expect(problem.type).toBe('https://verity.dev/problems/bad-request');
    expect(problem.detail).toMatch(/^(authorization|host) may be given once$/);
  });

  it('still answers an HTTP/1.0 request without Host (HTTP/1.0 has no such rule)', async () => {
    const { head, body } = await rawAnswer('GET /health/live HTTP/1.0\r\n\r\n');
    expect(head).toMatch(/^HTTP\/1\.1 200 /);
    expect(JSON.parse(body)).toEqual({ status: 'ok' });
  });

  it('compares tokens only when one is configured', () => {
    expect(isMetricsToken({ METRICS_TOKEN: undefined }, 'anything')).toBe(false);
    expect(isMetricsToken({ METRICS_TOKEN: TOKEN }, null)).toBe(false);
    expect(isMetricsToken({ METRICS_TOKEN: TOKEN }, TOKEN)).toBe(true);
  });

  it('closes on SIGTERM although a client holds a request half-sent (a slow-headers client cannot stall the drain)', async () => {
    const own = await startOwnServer();
    const socket = connect(own.port, '127.0.0.1');
    const cut = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.on('error', () => undefined);
    // Headers begun and never finished: the server holds this request open until its headers timeout (a minute).
    await new Promise<void>((resolve) => socket.write('GET /health/live HTTP/1.1\r\nHost: x\r\n', () => resolve()));
    // The server has the request once it answers another one after it on a second connection.
    expect((await fetch(`http://127.0.0.1:${own.port}/health/live`)).status).toBe(200);
    await own.close();
    await cut;
  });

  it('runs one readiness check at a time however many probes arrive (a flood cannot drain the worker’s pool)', async () => {
    let calls = 0;
    const pending: (() => void)[] = [];
    const check = singleFlight(() => {
      calls += 1;
      return new Promise<string>((resolve) => pending.push(() => resolve(`answer ${calls}`)));
    });
    const flood = Array.from({ length: 50 }, () => check());
    expect(calls).toBe(1);
    pending.shift()!();
    expect(await Promise.all(flood)).toEqual(Array(50).fill('answer 1'));
    // The next probe after an answer asks again.
    const later = check();
    expect(calls).toBe(2);
    pending.shift()!();
    expect(await later).toBe('answer 2');
  });

  it(
    'hangs up on a client that does not finish its headers within OPS_HEADERS_TIMEOUT_MS (no slow-headers pile-up)',
    async () => {
      const socket = connect(server.port, '127.0.0.1');
      socket.on('error', () => undefined);
      const answer: Buffer[] = [];
      socket.on('data', (chunk: Buffer) => answer.push(chunk));
      const cut = new Promise<void>((resolve) => socket.once('close', () => resolve()));
      socket.write('GET /health/live HTTP/1.1\r\nHost: x\r\n');
      await cut;
      expect(Buffer.concat(answer).toString()).toMatch(/^HTTP\/1\.1 408/);
      expect(Buffer.concat(answer).toString()).toMatch(/application\/problem\+json[\s\S]*"status":408/);
    },
    OPS_HEADERS_TIMEOUT_MS + 10_000,
  );

  it('holds at most OPS_MAX_CONNECTIONS connections: more are refused, the process keeps its file descriptors', async () => {
    const own = await startOwnServer();
    const held: Socket[] = [];
    const answered = (socket: Socket) =>
      new Promise<boolean>((resolve) => {
        socket.once('data', () => resolve(true));
        socket.once('close', () => resolve(false));
        socket.write('GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n');
      });
    try {
      // Each connection answered once, then left open (keep-alive): the server holds every one of them.
      for (let i = 0; i < OPS_MAX_CONNECTIONS; i += 1) {
        const socket = connect(own.port, '127.0.0.1');
        socket.on('error', () => undefined);
        held.push(socket);
        expect(await answered(socket)).toBe(true);
      }
      const extra = connect(own.port, '127.0.0.1');
      extra.on('error', () => undefined);
      held.push(extra);
      expect(await answered(extra)).toBe(false);
    } finally {
      for (const socket of held) socket.destroy();
      await own.close();
    }
  });
});

describe('a worker whose /metrics nobody can read', () => {
  /** The ops server's warn lines, started with `config`. */
  async function warnings(config: { METRICS_TOKEN?: string; METRICS_PUBLIC?: boolean }): Promise<string[]> {
    const lines: string[] = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => lines.push(line) });
    const server = await startOwnServer({
      config: { METRICS_TOKEN: undefined, METRICS_PUBLIC: undefined, ...config },
      logger,
    });
    await server.close();
    return lines.map((line) => (JSON.parse(line) as { msg: string }).msg);
  }

  it('says so at start when neither METRICS_TOKEN nor METRICS_PUBLIC is set (an operator key is the API’s only)', async () => {
    expect(await warnings({})).toEqual([
      expect.stringContaining('/metrics on this port answers nobody: set METRICS_TOKEN (or METRICS_PUBLIC=true)'),
    ]);
  });

  it('says nothing when a token is set, or /metrics is public', async () => {
    expect(await warnings({ METRICS_TOKEN: TOKEN })).toEqual([]);
    expect(await warnings({ METRICS_PUBLIC: true })).toEqual([]);
  });
});

describe('originForm', () => {
  it('reads the path and query out of an absolute-form target, rewriting nothing in them', () => {
    expect(originForm('/metrics?x=1')).toBe('/metrics?x=1');
    expect(originForm('*')).toBe('*');
    expect(originForm('http://h:9/metrics?x=1')).toBe('/metrics?x=1');
    expect(originForm('HTTPS://h/a/../metrics')).toBe('/a/../metrics');
    expect(originForm('http://h')).toBe('/');
    expect(originForm('http://h?x')).toBe('/?x');
    expect(originForm('http://[::1]:9/health/live')).toBe('/health/live');
  });
});
