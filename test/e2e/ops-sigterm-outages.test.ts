import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PrivateService, freePort, startPrivateRedis } from '../../scripts/local-services';
import { RunningApp, Stack, waitFor } from '../support/stack';
import { StallablePostgres } from '../support/stallable-postgres';
import { DEMO, METRICS_TOKEN } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { waitForMarkers } from './dispatcher-helpers';
import type { Execution } from '@verity/sdk';

/**
 * SIGTERM to a worker app while Redis is down must still end in exit 0 within seconds, after the jobs running in the
 * process finished. Before: BullMQ's close waited for its blocking connection's 'end', which ioredis never emits for a
 * client disconnected while it waits to reconnect, so every such SIGTERM hung until the forced exit 1 after 25 s.
 */
describe('worker SIGTERM during outages', () => {
  let stack: Stack;
  const dirs: string[] = [];
  const services: PrivateService[] = [];
  let pg: StallablePostgres | undefined;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'opsterm', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => {
    for (const service of services) await service.stop().catch(() => undefined);
    await pg?.stop();
    await stack?.stop();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  /** A private Redis of this test's own, and the env that points an app at it under a fresh queue prefix. */
  async function privateRedis(label: string) {
    const dir = mkdtempSync(join(tmpdir(), 'verity-opsterm-'));
    dirs.push(dir);
    const redis = await startPrivateRedis({ dir, port: await freePort() });
    services.push(redis);
    return { redis, env: { REDIS_URL: redis.url, QUEUE_PREFIX: `{${unique(label)}}` } };
  }

  /**
   * SIGTERM to the app: its exit code (its output is printed when it is not 0). 0 is a stop that finished; one held past
   * SHUTDOWN_GRACE_MS is the forced exit 1.
   */
  async function stop(app: RunningApp): Promise<{ code: number | null }> {
    app.child.kill('SIGTERM');
    const code = await app.exited;
    if (code !== 0) console.log(app.output.join('').slice(-4000));
    return { code };
  }

  it.each(['dispatcher', 'reconciler'] as const)(
    '%s: Redis down, SIGTERM exits 0 (not the forced exit)',
    async (name) => {
      const { redis, env } = await privateRedis('opsterm');
      const app = await stack.startApp(name, env);
      await redis.kill('SIGKILL');
      // The worker has noticed (its error listener logged): the stop below is a stop during the outage.
      await waitFor(
        async () => /ECONNREFUSED|Connection is closed|worker error/.test(app.output.join('')),
        (seen) => seen,
        15_000,
      );
      const { code } = await stop(app);
      expect(code).toBe(0);
    },
    60_000,
  );

  it('dispatcher: Redis dies during a send, SIGTERM: the send finishes and is recorded, exit 0 (not the forced exit)', async () => {
    const { redis, env } = await privateRedis('opstermsend');
    const port = await freePort();
    await stack.startApp('api', { ...env, PORT: String(port), HOST: '127.0.0.1' });
    const app = await stack.startApp('dispatcher', { ...env, TEST_PAUSE_AFTER_CALL_MS: '3000' });
    const created = await http<Execution>(`http://127.0.0.1:${port}`, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('opsterm-send'))]),
    });
    expect(created.status).toBe(201);
    await waitForMarkers(app, 'paused after call', 1);
    await redis.kill('SIGKILL');
    const { code } = await stop(app);
    expect(code).toBe(0);
    // Recorded by the stopping process itself (no reconciler runs here): not left SENT.
    const [op] = (await stack.db.dataSource.query('SELECT status FROM operations WHERE execution_id = $1', [
      created.body.id,
    ])) as { status: string }[];
    expect(op.status).not.toBe('SENT');
    expect(op.status).not.toBe('PENDING');
  }, 60_000);

  it('api: Redis down with an open stream, SIGTERM exits 0 (not the forced exit)', async () => {
    const { redis, env } = await privateRedis('opstermapi');
    const { app, url } = await stack.startApiApp(env);
    const created = await http<Execution>(url, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('opsterm-api'), { requires_approval: true })]),
    });
    expect(created.status).toBe(201);
    const stream = await fetch(`${url}/v1/executions/${created.body.id}/stream`, {
      headers: { authorization: `Bearer ${DEMO.agent}` },
    });
    expect(stream.status).toBe(200);
    const body = stream.body!.getReader();
    await body.read();
    await redis.kill('SIGKILL');
    const { code } = await stop(app);
    expect(code).toBe(0);
    // The stream was ended, not cut.
    for (;;) if ((await body.read().catch(() => ({ done: true }))).done) break;
  }, 60_000);

  it('api: Redis down, an accepted execution counts in verity_enqueue_failures_total and readiness says 503', async () => {
    const { redis, env } = await privateRedis('opstermm');
    const { url } = await stack.startApiApp(env);
    await redis.kill('SIGKILL');
    const created = await http<Execution>(url, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('opsterm-metrics'))]),
    });
    expect(created.status).toBe(201);
    expect((await http(url, 'GET', '/health/ready')).status).toBe(503);
    const metrics = await http<string>(url, 'GET', '/metrics', { key: METRICS_TOKEN });
    expect(metrics.status).toBe(200);
    const line = String(metrics.body)
      .split('\n')
      .find((l) => l.startsWith('verity_enqueue_failures_total{') && l.includes('advance-execution'));
    expect(line).toBeDefined();
    expect(Number(line!.split(' ').pop())).toBeGreaterThanOrEqual(1);
  }, 60_000);

  it('reconciler: Postgres stalled, SIGTERM exits 0 (not the forced exit)', async () => {
    pg = await StallablePostgres.start('opsterm-pg');
    const env = { DATABASE_URL: pg.url, QUEUE_PREFIX: `{${unique('opstermpg')}}`, DATABASE_QUERY_TIMEOUT_MS: '1500' };
    await stack.startApiApp({ ...env, RUN_MIGRATIONS: 'true', SEED_DEMO: 'true' });
    const app = await stack.startApp('reconciler', env);
    pg.stall();
    // A statement of the reconciler's (its sweep) has reached the stalled server: it is waiting on it.
    await waitFor(
      async () => pg!.unreadBytes(),
      (bytes) => bytes > 0,
      15_000,
    );
    const { code } = await stop(app);
    pg.resume();
    expect(code).toBe(0);
  }, 60_000);

  /**
   * A stop while Postgres is stalled waits for the statement in flight (up to DATABASE_QUERY_TIMEOUT_MS), then ends
   * the pool's sessions. Before, each session's end also waited up to DATABASE_QUERY_TIMEOUT_MS for a server that never
   * closes its side: about twice the query timeout in all, so 14 s with the default 25 s grace ended in the forced
   * exit 1. A reconciler stopped mid-sweep waits for two statements in a row (a pass's, then the release of the sweep
   * lock on its own session): 14 s twice did not fit in 25 s either (exit 1, "shutdown timed out"). Once the stop has
   * begun, a statement gets only what is left of the grace (less its margin): the whole stop fits.
   */
  it('api and reconciler mid-sweep: Postgres stalled, query timeout 14 s, SIGTERM within the 25 s grace exits 0', async () => {
    const stalled = await StallablePostgres.start('opsterm-pg-long');
    try {
      const env = {
        DATABASE_URL: stalled.url,
        QUEUE_PREFIX: `{${unique('opstermpglong')}}`,
        DATABASE_QUERY_TIMEOUT_MS: '14000',
      };
      const { app: api, url } = await stack.startApiApp({ ...env, RUN_MIGRATIONS: 'true', SEED_DEMO: 'true' });
      const reconciler = await stack.startApp('reconciler', { ...env, TEST_PAUSE_IN_SWEEP_MS: '60000' });
      // A sweep holds its lock (its own session) and has run its first pass (on another session of the pool).
      await waitFor(
        async () => reconciler.output.join(''),
        (out) => out.includes('paused in sweep'),
        30_000,
      );
      stalled.stall();
      // The sweep's next statement waits on the stalled server.
      reconciler.child.kill('SIGUSR2');
      const swept = await waitFor(
        async () => stalled.unreadBytes(),
        (bytes) => bytes > 0,
        15_000,
      );
      // And a request of the API's.
      const request = http(url, 'GET', '/v1/executions?limit=1', { key: DEMO.agent }).catch(() => undefined);
      await waitFor(
        async () => stalled.unreadBytes(),
        (bytes) => bytes > swept,
        15_000,
      );
      const [apiStop, reconcilerStop] = await Promise.all([stop(api), stop(reconciler)]);
      await request;
      expect(apiStop.code).toBe(0);
      expect(reconcilerStop.code).toBe(0);
    } finally {
      await stalled.stop();
    }
  }, 90_000);
});
