import { ConnectorRegistry, TenantConnectors } from '@verity/connectors';
import { SecretsCipher, TransitionService } from '@verity/persistence';
import { createLogger, createRedis, loadConfig } from '@verity/platform';
import { JobName, QueueName, scheduledRecheckJobId } from '@verity/queues';
import { Job, Worker } from 'bullmq';
import { insertChargeExecution } from '../support/fixtures';
import { producerDuringDescribe } from '../support/producer';
import { TEST_REDIS_URL } from '../support/services';
import { useTestDatabase } from '../support/test-database';
import { SchemaGate } from '../../apps/reconciler/src/schema-gate';
import { SweeperService } from '../../apps/reconciler/src/sweeper.service';
import { VerificationService } from '../../apps/reconciler/src/verification.service';

/**
 * The sweeper re-arms the automatic re-check of a hold whose `next_check_at` is overdue (its delayed job lost, or late).
 * A hold has one chain of automatic re-checks: a scheduled re-check reads and writes only while the row still names its
 * due time. The sweeper's re-check used to carry no due time (and an id of its own, one per sweep window): it ran
 * unguarded beside the chain's own job when that was only late, and, armed for a due time a read re-dated since, it
 * read and wrote out of turn — a second chain. Now it is the chain's job for the due time it was armed for: the same
 * id (scheduledRecheckJobId), carrying that due time. Sweeper and re-checks in-process, on real Postgres and Redis, no
 * worker: the jobs are looked at in Redis and run by hand as the processor runs them.
 */
describe('sweeper: a re-armed automatic re-check is the chain’s own (real Postgres and Redis)', () => {
  const db = useTestDatabase('sweeprecheck', ['acme']);
  const queues = producerDuringDescribe('sweeprecheck');
  const logger = createLogger('sweep-recheck-spec', 'silent');
  let sweeper: SweeperService;
  let verification: VerificationService;

  beforeAll(async () => {
    // The source is unreachable (nothing listens on port 9): a re-check that reads keeps the hold held.
    const config = loadConfig({
      REDIS_URL: TEST_REDIS_URL,
      QUEUE_PREFIX: queues.prefix,
      STALE_EXECUTION_MS: '1000',
      SANDBOX_URL: 'http://127.0.0.1:9',
    });
    const transitions = new TransitionService();
    sweeper = new SweeperService(
      db.dataSource,
      transitions,
      queues.producer,
      new SchemaGate(db.dataSource, logger),
      queues.redis,
      config,
      logger,
    );
    verification = new VerificationService(
      db.dataSource,
      transitions,
      queues.producer,
      new TenantConnectors(new ConnectorRegistry(), db.dataSource, new SecretsCipher(undefined), config),
      config,
      logger,
    );
  });

  /** A sent charge held SOURCE_UNREACHABLE whose next automatic re-check was due an hour ago: the sweep owes it. */
  async function overdueHold(): Promise<{ operationId: string; executionId: string; due: Date }> {
    const { operationId, executionId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    const due = new Date(Math.floor(Date.now() / 1000) * 1000 - 3_600_000 + 123);
    await db.dataSource.query(
      `UPDATE operations SET status = 'MANUAL_REVIEW', terminal_reason = 'SOURCE_UNREACHABLE', attempt = 1,
              sent_at = now(), obligation = $2, next_check_at = $3 WHERE id = $1`,
      [
        operationId,
        JSON.stringify({ reason: 'SOURCE_UNREACHABLE', due_at: new Date(Date.now() + 3_600_000).toISOString() }),
        due,
      ],
    );
    return { operationId, executionId, due };
  }

  /** The re-check jobs of the operation in Redis, whatever their state. */
  async function recheckJobs(operationId: string): Promise<Job[]> {
    const jobs: Job[] = [];
    for (const queue of await queues.producer.connectedQueues(QueueName.RECONCILE)) {
      for (const job of await queue.getJobs(['waiting', 'delayed', 'active', 'prioritized', 'failed'])) {
        if (job?.name === JobName.RECHECK_OPERATION && job.data.operationId === operationId) jobs.push(job);
      }
    }
    return jobs;
  }

  /** Runs a re-check job as the reconcile processor does. */
  const run = (job: Job) => verification.recheck(job.data.operationId, job.data.requestId, job.data.dueAt);

  it('re-arms a lost re-check as the chain’s job for the due time the row names', async () => {
    const { operationId, due } = await overdueHold();
    const report = await sweeper.sweep();
    expect(report.ran).toBe(true);
    const jobs = await recheckJobs(operationId);
    expect(jobs.map((j) => ({ id: j.id, dueAt: j.data.dueAt }))).toEqual([
      { id: scheduledRecheckJobId(operationId, due), dueAt: due.toISOString() },
    ]);
    // A reviewer's read (or a "still unknown") re-dated the hold before the re-armed job ran: the chain is theirs now,
    // and the re-armed job reads nothing and writes nothing.
    await db.dataSource.query(`UPDATE operations SET next_check_at = now() + interval '1 minute' WHERE id = $1`, [
      operationId,
    ]);
    expect(await run(jobs[0])).toBe('skipped: superseded');
  });

  it('a due time written with microseconds (by the database’s clock, or by hand) still names the chain’s job', async () => {
    // Its job carries the time as a JS Date has it (milliseconds). Compared to the microsecond, the re-check's write was
    // refused ("lost race") on every sweep's re-armed job: the hold was never re-checked again and nothing said so.
    const { operationId } = await overdueHold();
    await db.dataSource.query(
      `UPDATE operations SET next_check_at = date_trunc('second', now()) - interval '1 hour'
              + interval '123456 microseconds' WHERE id = $1`,
      [operationId],
    );
    await sweeper.sweep();
    const jobs = await recheckJobs(operationId);
    expect(jobs).toHaveLength(1);
    expect(await run(jobs[0])).toBe('still held: unreachable');
    const [op] = (await db.dataSource.query(
      `SELECT next_check_at > now() AS redated, obligation->'rechecks' AS rechecks FROM operations WHERE id = $1`,
      [operationId],
    )) as { redated: boolean; rechecks: number }[];
    expect(op).toEqual({ redated: true, rechecks: 1 });
  });

  it('adds no second job beside the chain’s own that is only late', async () => {
    const { operationId, executionId, due } = await overdueHold();
    // The chain's job for that due time is still in Redis (a backed-up queue, no reconciler running).
    await queues.producer.enqueue(
      JobName.RECHECK_OPERATION,
      { operationId, executionId, dueAt: due.toISOString() },
      { jobId: scheduledRecheckJobId(operationId, due) },
    );
    await sweeper.sweep();
    await sweeper.sweep();
    const jobs = await recheckJobs(operationId);
    expect(jobs.map((j) => j.id)).toEqual([scheduledRecheckJobId(operationId, due)]);
  });

  it('re-arms the chain’s job of that due time when it failed (its attempts spent), under the same id', async () => {
    const { operationId, executionId, due } = await overdueHold();
    const id = scheduledRecheckJobId(operationId, due);
    const [queue] = await queues.producer.connectedQueues(QueueName.RECONCILE);
    // The jobs the tests before left waiting go: the one taken below is this test's.
    await queue.drain(true);
    await queues.producer.enqueue(
      JobName.RECHECK_OPERATION,
      { operationId, executionId, dueAt: due.toISOString() },
      { jobId: id, attempts: 1 },
    );
    // Failed by hand, as a worker whose every attempt failed (Postgres down) leaves it: kept a day under its id.
    const job = (await queue.getJob(id))!;
    const token = 'sweep-recheck-spec';
    // A worker that only takes the job (no processor), so the test fails it as its last attempt would.
    const connection = createRedis(TEST_REDIS_URL, 'worker', 'sweep-recheck-spec');
    const taken = new Worker(QueueName.RECONCILE, null, { connection, prefix: queue.opts.prefix });
    try {
      const active = (await taken.getNextJob(token))!;
      expect(active.id).toBe(job.id);
      await active.moveToFailed(new Error('Postgres was down'), token);
    } finally {
      await taken.close();
      connection.disconnect();
    }
    expect(await (await queue.getJob(id))!.getState()).toBe('failed');
    await sweeper.sweep();
    const jobs = await recheckJobs(operationId);
    expect(jobs.map((j) => j.id)).toEqual([id]);
    expect(await jobs[0].getState()).not.toBe('failed');
    expect(jobs[0].data.dueAt).toBe(due.toISOString());
  });
  /**
   * A hold whose re-check cannot read (its connector reads back no more, or is gone: a deploy without it) keeps its
   * `next_check_at`, so a redeploy that can read again revives its chain. Its re-check used to skip without a write:
   * the row still overdue with its `updated_at` unchanged, first in the sweep's batch on every sweep, so more such holds
   * than the batch took all of it each time and no other owed check was armed again. A skipped scheduled re-check
   * now moves its hold's `next_check_at` on by the chain's backoff (compare-and-set): out of the way, still owed.
   */
  it('holds whose re-check cannot read do not crowd the other owed checks out of the sweep’s batch', async () => {
    const batch = 3;
    const small = new SweeperService(
      db.dataSource,
      new TransitionService(),
      queues.producer,
      new SchemaGate(db.dataSource, logger),
      queues.redis,
      loadConfig({
        REDIS_URL: TEST_REDIS_URL,
        QUEUE_PREFIX: queues.prefix,
        STALE_EXECUTION_MS: '1000',
        SANDBOX_URL: 'http://127.0.0.1:9',
        SWEEP_BATCH: String(batch),
      }),
      logger,
    );
    // Only this test's holds are owed a re-check.
    await db.dataSource.query(`UPDATE operations SET next_check_at = NULL WHERE status = 'MANUAL_REVIEW'`);
    // More holds than the batch whose re-check cannot read, held (and last written) before the one that can be read:
    // their connector is gone, or — the last — the hold is decided (a resolution recorded) with next_check_at still set.
    const unreadable: { operationId: string; due: Date; skipped: string }[] = [];
    for (let i = 0; i < batch + 1; i += 1) {
      const hold = await overdueHold();
      const decided = i === batch;
      await db.dataSource.query(
        decided
          ? `UPDATE operations SET obligation = obligation || '{"resolution": {"status": "FAILED"}}'::jsonb,
                    updated_at = now() - interval '2 hours' WHERE id = $1`
          : `UPDATE operations SET connector = 'sandbox.retired', updated_at = now() - interval '2 hours' WHERE id = $1`,
        [hold.operationId],
      );
      unreadable.push({ ...hold, skipped: decided ? 'skipped: not held' : 'skipped: cannot read back' });
    }
    const readable = await overdueHold();
    await db.dataSource.query(`UPDATE operations SET updated_at = now() - interval '1 hour' WHERE id = $1`, [
      readable.operationId,
    ]);
    // Each sweep, then the re-check jobs it armed for the unreadable holds run, as a reconciler would run them.
    let armed = false;
    for (let sweep = 0; sweep < 2 && !armed; sweep += 1) {
      await small.sweep();
      armed = (await recheckJobs(readable.operationId)).length > 0;
      for (const { operationId, skipped } of unreadable) {
        for (const job of await recheckJobs(operationId)) {
          if ((await job.getState()) !== 'waiting') continue;
          expect(await run(job)).toBe(skipped);
          await job.remove();
        }
      }
    }
    expect(armed).toBe(true);
    // The unreadable holds are still owed their re-check, later: a deploy that can read them again revives each chain.
    const rows = (await db.dataSource.query(
      `SELECT next_check_at > now() AS later FROM operations WHERE id = ANY($1) AND next_check_at IS NOT NULL`,
      [unreadable.map((h) => h.operationId)],
    )) as { later: boolean }[];
    expect(rows).toEqual(unreadable.map(() => ({ later: true })));
    // A deploy whose connector reads back again, once the moved due time has come (set back by hand here): the
    // sweeper arms the chain's job for it, which reads.
    const [revived] = unreadable;
    await db.dataSource.query(
      `UPDATE operations SET connector = 'sandbox.payments', next_check_at = now() - interval '1 hour' WHERE id = $1`,
      [revived.operationId],
    );
    await small.sweep();
    const [job] = await recheckJobs(revived.operationId);
    expect(await run(job)).toBe('still held: unreachable');
  });

  /**
   * A hold whose scheduled re-checks keep failing to read (its connector is gone) is moved on further each time: by as
   * long as it has gone unread (since its `updated_at`, which the postponement leaves as it was and every read of the
   * hold stamps), at least the chain's backoff and at most RECHECK_BACKOFF_MAX_MS — the wait doubles with each
   * consecutive unread re-check. Before, every one moved it by the same delay (the chain's backoff, its count of reads
   * unchanged), so such a hold was armed and skipped every minute or so for as long as its connector was gone.
   */
  it('a hold whose scheduled re-checks cannot read is moved on further each time, doubling, at most the maximum', async () => {
    const { operationId } = await overdueHold();
    // Its connector is gone; it was written a minute before its re-check came due (now).
    await db.dataSource.query(
      `UPDATE operations SET connector = 'sandbox.retired', updated_at = clock_timestamp() - interval '60 seconds',
              next_check_at = clock_timestamp() WHERE id = $1`,
      [operationId],
    );
    const delays: number[] = [];
    for (let i = 0; i < 6; i += 1) {
      const [{ due }] = (await db.dataSource.query(`SELECT next_check_at AS due FROM operations WHERE id = $1`, [
        operationId,
      ])) as { due: Date }[];
      expect(await verification.recheck(operationId, undefined, due.toISOString())).toBe('skipped: cannot read back');
      const [{ delay }] = (await db.dataSource.query(
        `SELECT extract(epoch FROM next_check_at - clock_timestamp()) * 1000 AS delay FROM operations WHERE id = $1`,
        [operationId],
      )) as { delay: string }[];
      delays.push(Math.round(Number(delay) / 1000));
      // That delay passes (every time of the row set back by it): the moved re-check is due now.
      await db.dataSource.query(
        `UPDATE operations SET updated_at = updated_at - (next_check_at - clock_timestamp()),
                next_check_at = clock_timestamp() WHERE id = $1`,
        [operationId],
      );
    }
    // RECHECK_BACKOFF_MS 30 s (the chain's backoff before its first read: 60 s), RECHECK_BACKOFF_MAX_MS 600 s.
    const expected = [60, 120, 240, 480, 600, 600];
    // (Within 5 s: closeTo at -1 digits.)
    expect(delays).toEqual(expected.map((seconds) => expect.closeTo(seconds, -1)));
  });

  it('a hold whose re-check cannot read is not moved past its obligation’s due time', async () => {
    // Unread for 5 minutes, due in 90 s: moved to its due time, not 5 minutes on, so a connector deployed again before
    // the hold escalates reads it by then (the chain's own re-checks stop at the due time, its last one before).
    const { operationId } = await overdueHold();
    await db.dataSource.query(
      `UPDATE operations SET connector = 'sandbox.retired', updated_at = clock_timestamp() - interval '300 seconds',
              next_check_at = clock_timestamp(),
              obligation = obligation || jsonb_build_object('due_at',
                to_char((clock_timestamp() + interval '90 seconds') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
        WHERE id = $1`,
      [operationId],
    );
    const [{ due }] = (await db.dataSource.query(`SELECT next_check_at AS due FROM operations WHERE id = $1`, [
      operationId,
    ])) as { due: Date }[];
    expect(await verification.recheck(operationId, undefined, due.toISOString())).toBe('skipped: cannot read back');
    const [{ delay, past_due }] = (await db.dataSource.query(
      `SELECT extract(epoch FROM next_check_at - clock_timestamp()) AS delay,
              -- (To within the measure of the clocks' offset the delay is counted with.)
              next_check_at > (obligation->>'due_at')::timestamptz + interval '1 second' AS past_due
         FROM operations WHERE id = $1`,
      [operationId],
    )) as { delay: string; past_due: boolean }[];
    expect([Number(delay), past_due]).toEqual([expect.closeTo(90, -1), false]);
  });
});
