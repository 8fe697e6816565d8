import { Stack, waitFor } from '../support/stack';
import { charge, unique } from '../support/http';
import { logLines, settle, stackQueue, submit } from './dispatcher-helpers';

/**
 * The sweep must not depend on Redis alone: when BullMQ's schedule stops delivering the sweep job (here: the sweep
 * queue paused, as a worker that takes no job looks from outside), a reconciler sees in Postgres that no sweep has
 * started for ten intervals (5 s with the test timings) and sweeps itself, so lost jobs are still re-derived.
 */
describe('sweeper: a sweep from the reconciler itself when the schedule stops delivering', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'sweepfallback', dispatchers: 0 });
  });
  afterAll(async () => stack?.stop());

  it('keeps sweeping with the sweep queue paused, and the sweep re-derives the lost advance job', async () => {
    const sweepQueue = stackQueue(stack, 'sweep');
    try {
      await sweepQueue.pause();
      const [{ pausedAt }] = (await stack.db.dataSource.query(`SELECT clock_timestamp() AS "pausedAt"`)) as {
        pausedAt: Date;
      }[];
      // Accepted while no dispatcher runs, its advance job then lost (as with a Redis that came back empty).
      const created = await submit(stack, [charge(unique('fallback'))]);
      const executions = stackQueue(stack, 'executions');
      await executions.obliterate({ force: true });
      await executions.close();

      // Sweeps that began after the schedule's last one could have: only the fallback can have started them.
      await waitFor(
        async () =>
          (
            (await stack.db.dataSource.query(
              `SELECT count(*)::int AS n FROM sweep_log WHERE started_at > $1::timestamptz + interval '5 seconds'
                 AND finished_at IS NOT NULL`,
              [pausedAt],
            )) as { n: number }[]
          )[0].n,
        (n) => n >= 2,
        30_000,
        200,
      );
      const [reconciler] = stack.running('reconciler');
      expect(logLines(reconciler).some((l) => String(l.msg).startsWith('no sweep has started for too long'))).toBe(
        true,
      );
      expect(await sweepQueue.isPaused()).toBe(true);

      // The fallback's sweep re-enqueued the stale execution: a dispatcher settles it.
      await stack.startApp('dispatcher');
      expect((await settle(stack, created.id)).status).toBe('completed');
    } finally {
      await sweepQueue.resume();
      await sweepQueue.close();
    }
  });
});
