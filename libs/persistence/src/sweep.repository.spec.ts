import { insertChargeExecution } from '../../../test/support/fixtures';
import { useTestDatabase } from '../../../test/support/test-database';
import { findExecutionForWorker } from './store';
import { ExecutionStatus, OperationStatus, cancelCauseOfEndedExecution } from '@verity/status-model';
import {
  SWEEP_SQL,
  endedWithStaleOutcome,
  heldOfEndedExecutions,
  msSinceLastSweep,
  traceParentsOf,
  unsentReleases,
  withSweepLock,
} from './sweep.repository';
import { snapshotOf } from './store';
import { TransitionService } from './transition.service';

describe('withSweepLock (real Postgres)', () => {
  const db = useTestDatabase('sweeplock');

  it('says how long ago the last sweep started: null before any, then the age of the newest row', async () => {
    expect(await msSinceLastSweep(db.dataSource.manager)).toBeNull();
    await db.dataSource.query(`INSERT INTO sweep_log (worker, started_at) VALUES ('old', now() - interval '1 hour')`);
    expect(await msSinceLastSweep(db.dataSource.manager)).toBeGreaterThanOrEqual(3_600_000);
    await db.dataSource.query(`INSERT INTO sweep_log (worker) VALUES ('new')`);
    expect(await msSinceLastSweep(db.dataSource.manager)).toBeLessThan(3_600_000);
    await db.dataSource.query(`DELETE FROM sweep_log`);
  });

  it('runs one sweep at a time: a second caller skips while the first holds the lock, and runs once it is released', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let entered!: () => void;
    const started = new Promise<void>((resolve) => (entered = resolve));
    const first = withSweepLock(db.dataSource, 'first', async () => {
      entered();
      await gate;
      return { ran: 'first' };
    });
    await started;
    let secondRan = false;
    const second = await withSweepLock(db.dataSource, 'second', () => {
      secondRan = true;
      return Promise.resolve({ ran: 'second' });
    });
    expect(second).toBeNull();
    expect(secondRan).toBe(false);
    release();
    expect(await first).toEqual({ ran: 'first' });
    expect(await withSweepLock(db.dataSource, 'third', () => Promise.resolve({ ran: 'third' }))).toEqual({
      ran: 'third',
    });
    const log = (await db.dataSource.query(
      `SELECT worker, report, finished_at IS NOT NULL AS finished FROM sweep_log ORDER BY id`,
    )) as { worker: string; report: unknown; finished: boolean }[];
    expect(log).toEqual([
      { worker: 'first', report: { ran: 'first' }, finished: true },
      { worker: 'third', report: { ran: 'third' }, finished: true },
    ]);
  });

  it('releases the lock when a sweep fails', async () => {
    await expect(withSweepLock(db.dataSource, 'failing', () => Promise.reject(new Error('boom')))).rejects.toThrow(
      'boom',
    );
    expect(await withSweepLock(db.dataSource, 'after', () => Promise.resolve({ ok: true }))).toEqual({ ok: true });
  });
});

describe('traceParentsOf (real Postgres)', () => {
  const db = useTestDatabase('sweeptrace', ['acme']);

  async function execution(traceParent: string | null) {
    return insertChargeExecution(db.dataSource.manager, 'acme', { execution: { traceParent } });
  }

  it('finds the traceparent stored with each execution, by execution or by operation; none for one made untraced', async () => {
    const traced = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const a = await execution(traced);
    const b = await execution(null);
    expect((await findExecutionForWorker(db.dataSource.manager, a.executionId))?.traceParent).toBe(traced);
    expect((await findExecutionForWorker(db.dataSource.manager, b.executionId))?.traceParent).toBeNull();
    expect(await traceParentsOf(db.dataSource.manager, 'executions', [a.executionId, b.executionId])).toEqual(
      new Map([[a.executionId, traced]]),
    );
    expect(await traceParentsOf(db.dataSource.manager, 'operations', [a.operationId, b.operationId])).toEqual(
      new Map([[a.operationId, traced]]),
    );
    expect(await traceParentsOf(db.dataSource.manager, 'executions', [])).toEqual(new Map());
  });
});

describe('unsentReleases (real Postgres)', () => {
  const db = useTestDatabase('sweeprelease', ['acme']);

  /** A charge moved by hand to `status` with `attempt`, its obligation carrying `resolution` (none: no resolution). */
  async function held(status: string, attempt: number, resolution?: { status: string; agoSeconds: number }) {
    const { executionId, operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    const obligation: Record<string, unknown> = { due_at: new Date(Date.now() + 3_600_000).toISOString() };
    if (resolution) {
      obligation.resolution = {
        status: resolution.status,
        evidence: 'test',
        by: 'key_test',
        at: new Date(Date.now() - resolution.agoSeconds * 1000).toISOString(),
      };
    }
    await db.dataSource.query(`UPDATE operations SET status = $2, attempt = $3, obligation = $4 WHERE id = $1`, [
      operationId,
      status,
      attempt,
      JSON.stringify(obligation),
    ]);
    return { id: operationId, execution_id: executionId };
  }

  it('finds the held, never-sent operations whose recorded release is older than the grace, oldest first', async () => {
    const older = await held('MANUAL_REVIEW', 0, { status: 'SENT', agoSeconds: 120 });
    const old = await held('MANUAL_REVIEW', 0, { status: 'SENT', agoSeconds: 60 });
    // Within the grace: the API's own job is still expected to carry it out.
    await held('MANUAL_REVIEW', 0, { status: 'SENT', agoSeconds: 1 });
    // Held and never sent, but nothing recorded (or the release was withdrawn): the reviewer's to decide.
    await held('MANUAL_REVIEW', 0);
    // Carried out: SENT by the release, and whatever it became after.
    await held('SENT', 1, { status: 'SENT', agoSeconds: 60 });
    await held('VERIFIED', 1, { status: 'SENT', agoSeconds: 60 });
    // Sent before it was held (attempt 1): never sent again, whatever its obligation says.
    await held('MANUAL_REVIEW', 1, { status: 'SENT', agoSeconds: 60 });

    expect(await unsentReleases(db.dataSource.manager, 30_000, 10)).toEqual([older, old]);
    expect(await unsentReleases(db.dataSource.manager, 30_000, 1)).toEqual([older]);
    expect(await unsentReleases(db.dataSource.manager, 90_000, 10)).toEqual([older]);
  });
});

describe('heldOfEndedExecutions (real Postgres)', () => {
  const db = useTestDatabase('sweepended', ['acme']);

  /**
   * A charge whose operation is set by hand to `status` with `attempt` (held for a knowledge conflict when
   * MANUAL_REVIEW), last moved `agoSeconds` ago, and whose execution is set to `execution`: rows as an older version left
   * them, or as any path may.
   */
  async function row(execution: string, status: string, attempt: number, agoSeconds = 0) {
    const { executionId, operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    await db.dataSource.query(
      `UPDATE operations SET status = $2, attempt = $3, updated_at = now() - make_interval(secs => $4),
              terminal_reason = CASE WHEN $2 = 'MANUAL_REVIEW' THEN 'KNOWLEDGE_CONFLICT' END WHERE id = $1`,
      [operationId, status, attempt, agoSeconds],
    );
    await db.dataSource.query(`UPDATE executions SET status = $2 WHERE id = $1`, [executionId, execution]);
    return { executionId, operationId };
  }

  const found = async (limit = 50) =>
    (await heldOfEndedExecutions(db.dataSource.manager, limit)).map((h) => ({
      id: h.operation.id,
      status: h.operation.status,
      attempt: h.operation.attempt,
      executionStatus: h.executionStatus,
    }));

  it('finds the never-sent holds of cancelled, expired and failed executions, oldest hold first, and nothing else', async () => {
    const cancelled = await row('cancelled', 'MANUAL_REVIEW', 0, 300);
    const expired = await row('expired', 'MANUAL_REVIEW', 0, 200);
    const failed = await row('failed', 'MANUAL_REVIEW', 0, 100);
    // Ever sent: its effect may exist, a person decides it whatever became of the execution.
    await row('cancelled', 'MANUAL_REVIEW', 1, 400);
    await row('expired', 'MANUAL_REVIEW', 2, 400);
    // The execution may still carry out a release: still running, waiting, or completed around the hold.
    for (const open of ['running', 'waiting_for_approval', 'waiting_for_tool', 'completed']) {
      await row(open, 'MANUAL_REVIEW', 0, 400);
    }
    // Not held: PREPARED (the cancel's own business) and already ended.
    await row('cancelled', 'PREPARED', 0, 400);
    await row('cancelled', 'CANCELLED', 0, 400);

    const expected = [
      { ...cancelled, executionStatus: ExecutionStatus.CANCELLED },
      { ...expired, executionStatus: ExecutionStatus.EXPIRED },
      { ...failed, executionStatus: ExecutionStatus.FAILED },
    ].map(({ operationId, executionStatus }) => ({
      id: operationId,
      status: OperationStatus.MANUAL_REVIEW,
      attempt: 0,
      executionStatus,
    }));
    expect(await found()).toEqual(expected);
    expect(await found(2)).toEqual(expected.slice(0, 2));

    // Each ended by the cancel's own statement: none is found again, and the others stay where they were.
    const transitions = new TransitionService();
    for (const held of await heldOfEndedExecutions(db.dataSource.manager, 50)) {
      expect(
        await transitions.cancelHeldOfEndedExecution(db.dataSource.manager, [snapshotOf(held.operation)], {
          cause: cancelCauseOfEndedExecution(held.executionStatus),
        }),
      ).toBe(1);
    }
    expect(await found()).toEqual([]);
    const [{ held }] = (await db.dataSource.query(
      `SELECT count(*)::int AS held FROM operations WHERE status = 'MANUAL_REVIEW'`,
    )) as { held: number }[];
    expect(held).toBe(6);
  });
});

describe('endedWithStaleOutcome (real Postgres)', () => {
  const db = useTestDatabase('sweepoutcome', ['acme']);

  /**
   * An execution in `status` whose stored outcome judged its charge (key `charge`) `verdict`, the charge now in
   * `operationStatus`, last moved `agoSeconds` ago.
   */
  async function ended(status: string, verdict: string, operationStatus: string, agoSeconds: number) {
    const { executionId, operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    const result = verdict === 'pending' ? 'pending' : verdict === 'pass' ? 'satisfied' : 'unmet';
    await db.dataSource.query(`UPDATE executions SET status = $2, criteria_results = $3, outcome = $4 WHERE id = $1`, [
      executionId,
      status,
      JSON.stringify([{ key: 'paid', operation: 'charge', expect_status: 'VERIFIED', verdict, rationale: 'test' }]),
      JSON.stringify({ result, evaluated_at: new Date(Date.now() - 3_600_000).toISOString() }),
    ]);
    await db.dataSource.query(
      `UPDATE operations SET status = $2, attempt = 1, updated_at = now() - make_interval(secs => $3) WHERE id = $1`,
      [operationId, operationStatus, agoSeconds],
    );
    return executionId;
  }

  it('finds ended executions with a pending verdict whose operation became final before the bound, and nothing else', async () => {
    const completed = await ended('completed', 'pending', 'VERIFIED', 60);
    const cancelled = await ended('cancelled', 'pending', 'FAILED', 60);
    // Still held: the verdict is right to be pending.
    await ended('completed', 'pending', 'MANUAL_REVIEW', 60);
    // Moved within the bound: the advance its move enqueued is still expected.
    await ended('completed', 'pending', 'VERIFIED', 0);
    // Judged already.
    await ended('completed', 'pass', 'VERIFIED', 60);
    // Not ended: the stale-execution sweep owns it.
    await ended('running', 'pending', 'VERIFIED', 60);

    expect((await endedWithStaleOutcome(db.dataSource.manager, 30_000, 10)).sort()).toEqual(
      [completed, cancelled].sort(),
    );
    expect(await endedWithStaleOutcome(db.dataSource.manager, 30_000, 1)).toHaveLength(1);
  });

  it('also under an outcome already unmet by another criterion: the pending verdict of a final operation is owed', async () => {
    const { executionId, operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    // Another criterion failed (the outcome is unmet for good), while the charge's verdict waited for its hold.
    await db.dataSource.query(
      `UPDATE executions SET status = 'completed', criteria_results = $2, outcome = $3 WHERE id = $1`,
      [
        executionId,
        JSON.stringify([
          { key: 'paid', operation: 'charge', expect_status: 'VERIFIED', verdict: 'pending', rationale: 'held' },
          { key: 'other', operation: 'charge', expect_status: 'FAILED', verdict: 'fail', rationale: 'test' },
        ]),
        JSON.stringify({ result: 'unmet', evaluated_at: new Date(Date.now() - 3_600_000).toISOString() }),
      ],
    );
    await db.dataSource.query(
      `UPDATE operations SET status = 'VERIFIED', attempt = 1, updated_at = now() - interval '60 seconds' WHERE id = $1`,
      [operationId],
    );
    expect(await endedWithStaleOutcome(db.dataSource.manager, 30_000, 100)).toContain(executionId);
    // Read by the partial index that holds only ended executions with a pending verdict, not by a scan of all.
    const plan = await db.dataSource.transaction(async (tx) => {
      await tx.query('SET LOCAL enable_seqscan = off');
      return (await tx.query(
        `EXPLAIN ${SWEEP_SQL.endedWithStaleOutcome.replaceAll('$1', '30000').replaceAll('$2', '10')}`,
      )) as { 'QUERY PLAN': string }[];
    });
    expect(plan.map((row) => row['QUERY PLAN']).join('\n')).toContain('executions_ended_pending_verdict');
  });
});
