import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PrivateService, freePort, redisCommands, startPrivateRedis } from '../../scripts/local-services';
import { charge, http, submission, unique } from '../support/http';
import { DEMO, Stack, waitFor } from '../support/stack';
import type { Execution } from '@verity/sdk';

/**
 * Liveness without Redis' memory: Redis is killed and started again EMPTY (no persistence) on the same port, under
 * running apps. Work accepted before the kill, while Redis is down (no job was ever enqueued for it) and after the
 * restart all settles, with no app restarted: the reconcilers put the sweep schedule back on the reconnect, and the
 * sweep re-derives every lost job from Postgres. A private Redis, so the shared one is never touched.
 */

describe('Redis restarted empty', () => {
  let stack: Stack;
  let redis: PrivateService;
  let dir = '';

  // A stack of its own for every test: one test's broken worker cannot fail the next.
  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'verity-empty-redis-'));
    redis = await startPrivateRedis({ dir, port: await freePort(), appendonly: false });
    stack = await Stack.start({ label: 'redisempty', reconcilers: 2, env: { REDIS_URL: redis.url } });
  });
  afterEach(async () => {
    await stack?.stop();
    await redis?.stop().catch(() => undefined);
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function submit(count: number, label: string): Promise<{ id: string; reference: string }[]> {
    const submitted: { id: string; reference: string }[] = [];
    for (let i = 0; i < count; i += 1) {
      const reference = unique(label);
      const res = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: submission([charge(reference)]),
      });
      expect(res.status).toBe(201);
      submitted.push({ id: res.body.id, reference });
    }
    return submitted;
  }

  async function execution(id: string): Promise<Execution> {
    return (await http<Execution>(stack.apiUrl, 'GET', `/v1/executions/${id}`, { key: DEMO.agent })).body;
  }

  it('settles everything accepted before, during and after the outage, without restarting any app', async () => {
    const pids = stack.apps.map((app) => app.child.pid);
    const beforeKill = await submit(6, 'before');

    await redis.kill('SIGKILL');
    // Accepted by Postgres alone: no job exists for these anywhere, only the sweep can find them.
    const duringOutage = await submit(4, 'during');
    await redis.restart();
    const [{ now: restartedAt }] = (await stack.db.dataSource.query(`SELECT now()`)) as { now: Date }[];
    const afterRestart = await submit(4, 'after');

    for (const { id } of [...beforeKill, ...duringOutage, ...afterRestart]) {
      const done = await waitFor(
        () => execution(id),
        (e) => e.status === 'completed',
        60_000,
        200,
      );
      expect(done.operations.map((o) => o.status)).toEqual(['VERIFIED']);
    }
    const effects = await stack.effects();
    for (const { reference } of [...beforeKill, ...duringOutage, ...afterRestart]) {
      expect(effects.charges[reference].count).toBe(1);
    }
    expect(effects.duplicates).toEqual([]);

    // The sweep has run since the restart (it is what found the work accepted during the outage)...
    const [{ sweeps }] = (await stack.db.dataSource.query(
      `SELECT count(*)::int AS sweeps FROM sweep_log WHERE started_at > $1`,
      [restartedAt],
    )) as { sweeps: number }[];
    expect(sweeps).toBeGreaterThan(0);
    // ...one at a time, however many reconcilers run.
    const [{ overlapping }] = (await stack.db.dataSource.query(
      `SELECT count(*)::int AS overlapping FROM sweep_log a JOIN sweep_log b ON a.id < b.id
       WHERE a.started_at < coalesce(b.finished_at, now()) AND b.started_at < coalesce(a.finished_at, now())`,
    )) as { overlapping: number }[];
    expect(overlapping).toBe(0);

    // No app was restarted: the same processes, all still running.
    expect(stack.apps.map((app) => app.child.pid)).toEqual(pids);
    for (const app of stack.apps) expect(app.child.exitCode === null && app.child.signalCode === null).toBe(true);
    // The reconcilers noticed, and said, that Redis came back without its data.
    const warning = stack
      .logs('reconciler')
      .split('\n')
      .find((line) => line.includes('Redis came back EMPTY'));
    expect(JSON.parse(warning ?? '{}')).toMatchObject({ level: 40, app: 'reconciler' });
  }, 180_000);

  it('finds a Redis emptied without a reconnect (FLUSHALL) by its periodic check, and the sweep runs again', async () => {
    const pids = stack.apps.map((app) => app.child.pid);
    const warnings = (): number => stack.logs('reconciler').split('Redis came back EMPTY').length - 1;
    const warned = warnings();
    expect(await redisCommands(redis.url, [['FLUSHALL']])).toEqual(['OK']);

    await waitFor(
      async () => warnings(),
      (count) => count > warned,
      30_000,
      100,
    );
    // And the sweep runs again (the schedule was re-added): a whole sweep after the warning.
    await stack.sweepsPassed(1);
    const reference = unique('flushed');
    const res = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(reference)]),
    });
    expect(res.status).toBe(201);
    await waitFor(
      () => execution(res.body.id),
      (e) => e.status === 'completed',
      60_000,
      200,
    );
    expect(stack.apps.map((app) => app.child.pid)).toEqual(pids);
  }, 120_000);
});
