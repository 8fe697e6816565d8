import { randomBytes } from 'node:crypto';
import { createServer, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type IORedis from 'ioredis';
import { DEMO, METRICS_TOKEN, Stack, waitFor } from '../support/stack';
import { TEST_REDIS_URL } from '../support/services';
import { charge, http, unique } from '../support/http';
import { Call, Op, httpOp, recordingClient, submitOps } from './connectors-support';

// Spaces, "/", "+" and a quote, so that its percent-encoded and JSON-escaped spellings differ from the plain one.
const SECRET = 'board-Secret/Qy72 never+shown"z';
const SPELLINGS = [SECRET, encodeURIComponent(SECRET), JSON.stringify(SECRET).slice(1, -1)];
const PLACEHOLDER = '{{secret:crm_token}}';
// Passwords in the workers' DATABASE_URL and every process's REDIS_URL (neither service asks for one here, so both work).
const DATABASE_PASSWORD = 'board-db-Pw9';
const REDIS_PASSWORD = 'board-redis-Pw9';

/** `url` with a password for its user (`postgres://user:password@…`, `redis://:password@…`). */
function withPassword(url: string, password: string): string {
  const parsed = new URL(url);
  parsed.password = password;
  return parsed.toString();
}

/**
 * One allow-listed host that answers with what it was sent (the secret in `authorization` among it): an order it
 * creates and reads back (the read finds another value: a person decides), an order whose answer it breaks off
 * midway (the connector cannot tell what happened), and two webhook receivers, one answering 500 with what it got
 * (the signature too), one dropping the connection: their deliveries fail and are retried.
 */
async function startHostileHost(): Promise<{ base: string; port: number; server: Server }> {
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      const echo = JSON.stringify({ url: req.url, headers: req.headers, body, id: 'ord_1' });
      if (req.url === '/break') {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(echo.length * 2) });
        res.write(echo);
        setImmediate(() => req.socket.destroy());
      } else if (req.url === '/hooks/reset') {
        req.socket.destroy();
      } else {
        const status = req.url === '/hooks/echo' ? 500 : req.method === 'POST' ? 201 : 200;
        res.writeHead(status, { 'content-type': 'application/json' }).end(echo);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return { base: `http://127.0.0.1:${port}`, port, server };
}

/** Every value Redis holds under the stack's prefix, whatever its type: what the board can show, and more. */
async function everythingInRedis(redis: IORedis, prefix: string): Promise<Map<string, string>> {
  const held = new Map<string, string>();
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    cursor = next;
    for (const key of keys) {
      const type = await redis.type(key);
      const value =
        type === 'string'
          ? await redis.get(key)
          : type === 'hash'
            ? await redis.hgetall(key)
            : type === 'list'
              ? await redis.lrange(key, 0, -1)
              : type === 'set'
                ? await redis.smembers(key)
                : type === 'zset'
                  ? await redis.zrange(key, 0, -1)
                  : type === 'stream'
                    ? await redis.xrange(key, '-', '+')
                    : `(${type})`;
      held.set(key, JSON.stringify(value));
    }
  } while (cursor !== '0');
  return held;
}

/** A URL that carries a password (`scheme://user:password@host`): DATABASE_URL, REDIS_URL, a target's. */
const URL_WITH_PASSWORD = /[a-z][a-z0-9+.-]*:\/\/[^\s/@"']*:[^\s/@"']+@/i;

/**
 * Bull Board shows the platform operator every tenant's jobs: their data, return values, failure reasons and stack
 * traces. None of them may hold a tenant's secret value (in any spelling), a webhook signing secret, an API key or a
 * URL with a password — after the paths that handle them ran and failed: a send whose answer echoes the secret, a
 * read-back of it, an answer broken off midway, a charge whose answer the sandbox provider drops (reconciled), webhook deliveries answered 500 with the signature echoed and cut off
 * before an answer (their jobs failed, kept for a retry). Read in Redis itself, as the board's API answers it, and in
 * what the processes printed. The workers run with a password in their DATABASE_URL and REDIS_URL.
 */
describe('Bull Board: what the jobs store and the board shows holds no secret', () => {
  let stack: Stack;
  let host: Awaited<ReturnType<typeof startHostileHost>>;
  let call: Call;
  const signingSecrets: string[] = [];

  beforeAll(async () => {
    host = await startHostileHost();
    stack = await Stack.start({
      label: 'boardsecrets',
      // Started below, with a password in their DATABASE_URL.
      dispatchers: 0,
      reconcilers: 0,
      env: {
        REDIS_URL: withPassword(TEST_REDIS_URL, REDIS_PASSWORD),
        SECRETS_KEY: randomBytes(32).toString('base64'),
        WEBHOOK_SCAN_INTERVAL_MS: '100',
        // A failed delivery waits a minute for its retry: its job, failure and all, is on the board meanwhile.
        WEBHOOK_BACKOFF_MS: '60000',
        WEBHOOK_MAX_ATTEMPTS: '3',
      },
    });
    for (const worker of ['dispatcher', 'reconciler'] as const) {
      // Sends by dispatch jobs, which are kept an hour with what they returned (an advance job sends none).
      await stack.startApp(worker, {
        DATABASE_URL: withPassword(stack.db.url, DATABASE_PASSWORD),
        SEND_IN_ADVANCE: 'false',
      });
    }
    ({ call } = recordingClient(stack));
    const settings = await call('PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: {
        allow_hosts: [{ host: '127.0.0.1', ports: [host.port], allow_private: true, secrets: ['crm_token'] }],
        secrets: { crm_token: SECRET },
      },
    });
    expect(settings.status).toBe(200);
    for (const path of ['/hooks/echo', '/hooks/reset']) {
      const created = await http<{ secret: string }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
        key: DEMO.admin,
        body: { url: `${host.base}${path}`, events: ['operation.needs_review', 'execution.finished'] },
      });
      expect(created.status).toBe(201);
      expect(created.body.secret).toMatch(/^whsec_/);
      signingSecrets.push(created.body.secret, created.body.secret.slice('whsec_'.length));
    }
  });
  afterAll(async () => {
    await stack?.stop();
    host?.server.closeAllConnections();
    await new Promise((resolve) => host?.server.close(resolve) ?? resolve(undefined));
  });

  const withSecret = { authorization: `Bearer ${PLACEHOLDER}` };

  /** The board's list of one queue's jobs in one status, as its page asks for it. */
  const boardList = async (queue: string, status: string) => {
    const query = new URLSearchParams({ activeQueue: queue, status, page: '1', jobsPerPage: '100' });
    const res = await http<{ queues: { name: string; jobs: Record<string, unknown>[] }[] }>(
      stack.apiUrl,
      'GET',
      `/admin/queues/api/queues?${query}`,
      { key: DEMO.operator },
    );
    expect([queue, status, res.status]).toEqual([queue, status, 200]);
    return { text: res.text, jobs: res.body.queues.find((q) => q.name === queue)?.jobs ?? [] };
  };

  it('sends, reads back and broken answers echoing the secret, and failed deliveries: nothing in Redis or on the board holds one', async () => {
    const execution = await submitOps(call, [
      httpOp('order', {
        method: 'POST',
        url: `${host.base}/orders`,
        headers: withSecret,
        ref_field: '$.id',
        read_back: {
          method: 'GET',
          url: `${host.base}/orders/{{ref}}`,
          headers: withSecret,
          field: '$.headers.authorization',
          equals: 'Bearer not-the-secret',
        },
      }),
      httpOp('broken', { method: 'POST', url: `${host.base}/break`, headers: withSecret, body: { note: 'x' } }),
    ]);
    // A charge whose answer the provider never gives (it committed it): the operation is reconciled, and found.
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', count: 1 }],
    });
    const charged = await submitOps(call, [charge(unique('board-charge'))]);
    await waitFor(
      async () => (await call<Op>('GET', `/v1/operations/${charged.operations[0].id}`)).body,
      (op) => op.status === 'VERIFIED',
      45_000,
      150,
    );
    const ops = [...execution.operations, ...charged.operations].map((op) => op.id);
    // The http ones end with a person: the read found another value, and a broken answer cannot be read back.
    for (const { id } of execution.operations) {
      await waitFor(
        async () => (await call<Op>('GET', `/v1/operations/${id}`)).body,
        (op) => op.status === 'MANUAL_REVIEW',
        45_000,
        150,
      );
    }
    // Each endpoint's first delivery failed, and waits for its retry with what it failed of.
    const reasonsOf = (jobs: Record<string, unknown>[]) =>
      jobs.map((job) => job.failedReason).filter((reason): reason is string => typeof reason === 'string');
    const failedBy = [/failed \(the endpoint answered 500\)/, /failed \(E[A-Z_]+: /];
    const failed = await waitFor(
      async () => (await boardList('webhooks', 'delayed')).jobs,
      (jobs) => failedBy.every((reason) => reasonsOf(jobs).some((text) => reason.test(text))),
      45_000,
      200,
    );
    expect(failed.some((job) => Array.isArray(job.stacktrace) && job.stacktrace.length > 0)).toBe(true);
    // The sends' jobs, with what they returned.
    const dispatched = (await boardList('dispatch', 'completed')).jobs;
    expect(dispatched.map((job) => (job.data as { operationId?: string }).operationId).sort()).toEqual([...ops].sort());
    expect(dispatched.map((job) => typeof job.returnValue)).toEqual(['string', 'string', 'string']);

    const forbidden = [
      ...SPELLINGS,
      ...signingSecrets,
      ...Object.values(DEMO),
      METRICS_TOKEN,
      DATABASE_PASSWORD,
      REDIS_PASSWORD,
    ];
    const { redis } = await stack.queues();
    const held = await everythingInRedis(redis, stack.prefix);
    expect(held.size).toBeGreaterThan(10);
    const leaks = [...held]
      .filter(([, value]) => forbidden.some((text) => value.includes(text)) || URL_WITH_PASSWORD.test(value))
      .map(([key]) => key);
    expect(leaks).toEqual([]);

    const shown: string[] = [];
    for (const queue of ['executions', 'dispatch', 'verify', 'reconcile', 'sweep', 'webhooks']) {
      for (const status of ['latest', 'active', 'waiting', 'delayed', 'completed', 'failed', 'prioritized']) {
        const { text } = await boardList(queue, status);
        if (forbidden.some((secret) => text.includes(secret)) || URL_WITH_PASSWORD.test(text)) {
          shown.push(`${queue}/${status}`);
        }
      }
    }
    // The board's other reads: its Redis panel (Redis with a password here), its page (its settings inline).
    for (const path of ['/api/redis/stats', '/api/queues/webhooks/' + String(failed[0].id), '/']) {
      const res = await http(stack.apiUrl, 'GET', `/admin/queues${path}`, { key: DEMO.operator });
      expect([path, res.status]).toEqual([path, 200]);
      if (forbidden.some((secret) => res.text.includes(secret)) || URL_WITH_PASSWORD.test(res.text)) shown.push(path);
    }
    expect(shown).toEqual([]);
    // Nor what the processes printed (their logs) while they ran those paths.
    const printed = stack.apps.filter((app) => forbidden.some((text) => app.output.join('').includes(text)));
    expect(printed.map((app) => `${app.name}#${app.index}`)).toEqual([]);
  });
});
