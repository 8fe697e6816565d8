import type { QueryRunner } from 'typeorm';
import { lockWaiters, waitForLockWaiter } from '../support/lock-waits';
import { Stack } from '../support/stack';
import { logLines, stackQueue, waitForLog } from './dispatcher-helpers';

/**
 * SIGTERM to a reconciler while its own timers' work is under way — the fallback sweep (the sweep schedule in Redis
 * not delivering) and the webhook outbox pass — waits for that work before Postgres and Redis close. Before, the close
 * went on under it: the pass failed half-way once its statements found the pool ended (a sweep left its sweep_log row
 * unfinished).
 */
describe('reconciler shutdown: the background work under way finishes first', () => {
  let stack: Stack;
  let lock: QueryRunner | undefined;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'stopsweep', apis: 0, dispatchers: 0, reconcilers: 0 });
    // Only the fallback sweeps: the schedule's jobs are never taken.
    const sweepQueue = stackQueue(stack, 'sweep');
    await sweepQueue.pause();
    await sweepQueue.close();
  });
  afterAll(async () => {
    if (lock?.isTransactionActive) await lock.rollbackTransaction();
    await lock?.release();
    await stack?.stop();
  });

  it.each([
    {
      work: 'a fallback sweep',
      // Its first read of executions (after its advisory lock and its sweep_log row) waits on this lock.
      table: 'executions',
      statementLike: '%FROM executions%',
      waiting: 'waiting for the fallback sweep under way to finish',
    },
    {
      work: 'a webhook outbox pass',
      // Its claim of the cursor (in the pass's transaction) waits on this lock.
      table: 'webhook_outbox_cursor',
      statementLike: '%FROM webhook_outbox_cursor%',
      waiting: 'waiting for the webhook outbox pass under way to finish',
    },
  ])(
    'SIGTERM during $work held on a lock: no exit until it ends, then both end cleanly',
    async (held) => {
      const db = stack.db.dataSource;
      lock = db.createQueryRunner();
      await lock.connect();
      await lock.startTransaction();
      await lock.query(`LOCK TABLE ${held.table} IN ACCESS EXCLUSIVE MODE`);
      const reconciler = await stack.startApp('reconciler');
      await waitForLockWaiter(db, { statementLike: held.statementLike });

      reconciler.child.kill('SIGTERM');
      await waitForLog(reconciler, (line) => line.msg === held.waiting);
      // Its workers are closed and it waits: the work is still held, the process still running.
      expect(await lockWaiters(db, held.statementLike)).toBeGreaterThan(0);
      expect(reconciler.child.exitCode).toBeNull();

      await lock.commitTransaction();
      await lock.release();
      lock = undefined;
      expect(await reconciler.exited).toBe(0);
      const sweeps = (await db.query(`SELECT finished_at FROM sweep_log`)) as { finished_at: Date | null }[];
      expect(sweeps.filter((s) => s.finished_at === null)).toEqual([]);
      // pino: 40 warn, 50 error. Nothing went wrong, not even a pass that failed and was left to the next one: the one
      // warning is the fallback's own, that it sweeps.
      const fallbackNotice = /^no sweep has started for too long/;
      expect(
        logLines(reconciler).filter((line) => Number(line.level) >= 40 && !fallbackNotice.test(String(line.msg))),
      ).toEqual([]);
    },
    90_000,
  );
});
