import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PrivateService, freePort, startPrivatePostgres, startPrivateRedis } from '../../scripts/local-services';
import { DEMO, RunningApp, Stack, waitFor } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { expectDoneOnce } from './dispatcher-helpers';
import type { Execution } from '@verity/sdk';

/**
 * I7: accepted means durable. When only Redis is down the API still answers 201 (the commit is what
 * counts; the sweeper owes the enqueue); when Postgres is down it answers 503 problem+json and writes nothing.
 * Each outage uses a private server of its own, so the shared Postgres and Redis are never touched.
 */

describe('outages', () => {
  let stack: Stack;
  const dirs: string[] = [];
  const services: PrivateService[] = [];

  beforeAll(async () => {
    stack = await Stack.start({ label: 'apiout' });
  });
  afterAll(async () => {
    for (const service of services) await service.stop().catch(() => undefined);
    await stack?.stop();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  function scratch(prefix: string): string {
    const dir = mkdtempSync(join(tmpdir(), prefix));
    dirs.push(dir);
    return dir;
  }

  it('answers 201 while Redis is down, and the sweeper gets the accepted execution processed', async () => {
    const redis = await startPrivateRedis({ dir: scratch('verity-api-redis-'), port: await freePort() });
    services.push(redis);
    const port = await freePort();
    // Same database as the stack's workers, but a Redis of its own that is about to disappear.
    await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1', REDIS_URL: redis.url });
    const url = `http://127.0.0.1:${port}`;
    await redis.kill('SIGKILL');

    const ready = await http<{ checks: Record<string, string> }>(url, 'GET', '/health/ready');
    expect(ready.status).toBe(503);
    expect(ready.body.checks).toEqual({ postgres: 'up', redis: 'down', schema: 'up' });

    const reference = unique('order');
    const res = await http<Execution>(url, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(reference)]),
      headers: { 'idempotency-key': unique('redis-down') },
    });
    expect(res.status).toBe(201);
    expect(res.body.status).toBe('created');
    const rows = (await stack.db.dataSource.query(
      `SELECT e.status, count(o.id)::int AS operations FROM executions e JOIN operations o ON o.execution_id = e.id
       WHERE e.id = $1 GROUP BY e.status`,
      [res.body.id],
    )) as { status: string; operations: number }[];
    expect(rows).toHaveLength(1);
    expect(rows[0].operations).toBe(1);

    // Reads need only Postgres.
    expect((await http(url, 'GET', `/v1/executions/${res.body.id}`, { key: DEMO.agent })).status).toBe(200);

    // Nothing was enqueued for it; the reconciler's sweep (on the shared Redis) finds it and the work is done.
    await expectDoneOnce(stack, stack.apiUrl, res.body.id, reference);
  });

  it('answers 503 problem+json while Postgres is down, writes nothing, and recovers when it is back', async () => {
    const pg = await startPrivatePostgres({ dir: scratch('verity-api-pg-'), port: await freePort() });
    services.push(pg);
    const { app: api, url } = await stack.startApiApp({
      DATABASE_URL: pg.url,
      RUN_MIGRATIONS: 'true',
      SEED_DEMO: 'true',
      // Its jobs would name executions the stack's workers cannot see: keep them in a queue of their own.
      QUEUE_PREFIX: `{${unique('pgdown')}}`,
    });
    const before = await http<Execution>(url, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('order'))]),
    });
    expect(before.status).toBe(201);

    await pg.stop();
    const attempts = [
      () => http(url, 'POST', '/v1/executions', { key: DEMO.agent, body: submission([charge(unique('order'))]) }),
      () => http(url, 'GET', `/v1/executions/${before.body.id}`, { key: DEMO.agent }),
      () => http(url, 'GET', '/v1/executions', { key: DEMO.agent }),
      () => http(url, 'POST', `/v1/executions/${before.body.id}/cancel`, { key: DEMO.agent }),
    ];
    for (const attempt of attempts) {
      const res = await attempt();
      expect(res.status).toBe(503);
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(res.body).toMatchObject({ type: 'https://verity.dev/problems/database-unavailable', status: 503 });
      expect(res.headers.get('retry-after')).toBe('1');
    }
    const ready = await http<{ checks: Record<string, string> }>(url, 'GET', '/health/ready');
    expect(ready.status).toBe(503);
    expect(ready.body.checks.postgres).toBe('down');
    expect((await http(url, 'GET', '/health/live')).status).toBe(200);
    // The outage is logged once, not once per request (each was an error line with its stack).
    const logged = (msg: string) => api.output.join('').split(`"msg":"${msg}`).length - 1;
    expect(logged('database unavailable: answering 503')).toBe(1);
    expect(logged('request failed')).toBe(0);

    await pg.restart();
    const after = await waitFor(
      () =>
        http<Execution>(url, 'POST', '/v1/executions', {
          key: DEMO.agent,
          body: submission([charge(unique('order'))]),
        }),
      (r) => r.status === 201,
      30_000,
      250,
    );
    expect(after.body.status).toBe('created');
    const listed = await http<{ data: { id: string }[] }>(url, 'GET', '/v1/executions', { key: DEMO.agent });
    // The request refused during the outage left nothing behind.
    expect(listed.body.data.map((e) => e.id)).toEqual([after.body.id, before.body.id]);
  });

  it('the reconciler logs a Postgres outage of its webhook outbox passes once, and once when they work again', async () => {
    const pg = await startPrivatePostgres({ dir: scratch('verity-rec-pg-'), port: await freePort() });
    services.push(pg);
    const env = { DATABASE_URL: pg.url, QUEUE_PREFIX: `{${unique('recpgdown')}}` };
    // The API migrates the private database; the reconciler polls its outbox every 50 ms.
    await stack.startApp('api', { ...env, PORT: String(await freePort()), HOST: '127.0.0.1', RUN_MIGRATIONS: 'true' });
    const reconciler = await stack.startApp('reconciler', { ...env, WEBHOOK_SCAN_INTERVAL_MS: '50' });
    const count = (msg: string) => reconciler.output.join('').split(`"msg":"${msg}`).length - 1;
    const line = (msg: string) =>
      reconciler.output
        .join('')
        .split('\n')
        .find((l) => l.includes(`"msg":"${msg}`));

    await pg.stop();
    await waitFor(
      async () => count('webhook outbox pass failed'),
      (n) => n >= 1,
    );
    await pg.restart();
    // Every pass failed until Postgres was back (a 50 ms tick: many of them); one line said so, one says it is over.
    const back = await waitFor(
      async () => line('webhook outbox passes work again'),
      (l) => l !== undefined,
      30_000,
    );
    expect(count('webhook outbox pass failed')).toBe(1);
    expect((JSON.parse(back!) as { failures: number }).failures).toBeGreaterThanOrEqual(1);
  });

  it('answers 503 problem+json, not 500, when Postgres refuses the pool another session (too many connections)', async () => {
    // A role with three connection slots: a burst of requests grows the API's pool (10) past them, and Postgres
    // refuses the extra sessions with 53300, as it does for everyone once max_connections is reached.
    const role = `verity_few_slots_${process.pid}`;
    await stack.db.dataSource.query(`CREATE ROLE ${role} LOGIN CONNECTION LIMIT 3`);
    const port = await freePort();
    let api: RunningApp | undefined;
    try {
      await stack.db.dataSource.query(`GRANT ALL ON ALL TABLES IN SCHEMA public TO ${role}`);
      await stack.db.dataSource.query(`GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO ${role}`);
      const database = new URL(stack.db.url);
      database.username = role;
      api = await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1', DATABASE_URL: database.toString() });
      const url = `http://127.0.0.1:${port}`;
      const answers = await Promise.all(
        Array.from({ length: 20 }, () => http(url, 'GET', '/v1/executions', { key: DEMO.agent })),
      );
      const refused = answers.filter((a) => a.status === 503);
      expect(refused.length).toBeGreaterThan(0);
      expect(answers.filter((a) => a.status !== 503).map((a) => a.status)).toEqual(
        Array(answers.length - refused.length).fill(200),
      );
      for (const res of refused) {
        expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
        expect(res.body).toMatchObject({ type: 'https://verity.dev/problems/database-unavailable', status: 503 });
        expect(res.headers.get('retry-after')).toBe('1');
      }
      // The burst over, the sessions it has are enough again.
      expect((await http(url, 'GET', '/v1/executions', { key: DEMO.agent })).status).toBe(200);
    } finally {
      if (api) await stack.kill(api, 'SIGTERM');
      await stack.db.dataSource.query(`DROP OWNED BY ${role}`);
      await stack.db.dataSource.query(`DROP ROLE ${role}`);
    }
  });
});
