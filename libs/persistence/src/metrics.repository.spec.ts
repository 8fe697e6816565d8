import { ExecutionStatus, OperationStatus, VerificationMethod } from '@verity/status-model';
import { intakeToSettled, intakeToVerified, transitionsCounter } from '@verity/platform';
import { insertChargeExecution } from '../../../test/support/fixtures';
import { useTestDatabase } from '../../../test/support/test-database';
import { IN_FLIGHT_OPERATION_STATUSES, METRICS_SQL, platformCounts } from './metrics.repository';
import { reviewQueueCounts } from './review-queue.repository';
import { Queryable, transaction } from './sql';
import { TransitionService } from './transition.service';

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  Plans?: PlanNode[];
}

function nodes(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(nodes)];
}

async function counterValue(labels: Record<string, string>): Promise<number> {
  const { values } = await transitionsCounter.get();
  return (
    values.find((v) => Object.entries(labels).every(([k, x]) => (v.labels as Record<string, unknown>)[k] === x))
      ?.value ?? 0
  );
}

async function histogramCount(
  histogram: typeof intakeToVerified | typeof intakeToSettled,
  labels: Record<string, string> = {},
): Promise<number> {
  const { values } = await histogram.get();
  const count = values.find(
    (v) =>
      v.metricName?.endsWith('_count') &&
      Object.entries(labels).every(([k, x]) => (v.labels as Record<string, unknown>)[k] === x),
  );
  return count?.value ?? 0;
}

/**
 * /metrics costs what is in flight, never what is in the log: the counters are kept as transitions commit, and the
 * statements a scrape runs neither name nor plan a read of the events table (so a million events cost it nothing).
 */
describe('metrics (real Postgres)', () => {
  const db = useTestDatabase('metricsrepo', ['acme']);
  const transitions = new TransitionService();

  async function newOperation(): Promise<{ executionId: string; operationId: string }> {
    const created = await insertChargeExecution(db.dataSource.manager, 'acme');
    await db.dataSource.query(`UPDATE executions SET status = 'running' WHERE id = $1`, [created.executionId]);
    return created;
  }

  const op = (id: string, status: OperationStatus, attempt: number) => ({
    id,
    status,
    attempt,
    verificationMethod: VerificationMethod.READ_AFTER_WRITE,
  });

  async function sendAndAcknowledge(db2: Queryable, operationId: string): Promise<void> {
    const sent = await transitions.operation(db2, {
      operation: op(operationId, OperationStatus.PREPARED, 0),
      to: OperationStatus.SENT,
      bumpAttempt: true,
      sendGuard: { kind: 'dispatch', approvalRequired: false },
    });
    expect(sent.won).toBe(true);
    await transitions.operation(db2, {
      operation: op(operationId, OperationStatus.SENT, 1),
      to: OperationStatus.ACKNOWLEDGED,
    });
  }

  it('counts committed transitions and observes intake → VERIFIED and intake → settled once', async () => {
    const { operationId } = await newOperation();
    const verifiedBefore = await counterValue({ type: 'operation.status_changed', to_status: 'VERIFIED' });
    const sentBefore = await counterValue({ type: 'operation.status_changed', to_status: 'SENT' });
    const toVerifiedBefore = await histogramCount(intakeToVerified);
    const settledBefore = await histogramCount(intakeToSettled, { status: 'VERIFIED' });

    await sendAndAcknowledge(db.dataSource.manager, operationId);
    // ACKNOWLEDGED with read-back owed is not settled yet: nothing observed.
    expect(await histogramCount(intakeToSettled)).toBe(settledBefore);
    const verified = await transitions.operation(db.dataSource.manager, {
      operation: op(operationId, OperationStatus.ACKNOWLEDGED, 1),
      to: OperationStatus.VERIFIED,
    });
    expect(verified.won).toBe(true);
    // A lost race (the same move again) counts nothing.
    const again = await transitions.operation(db.dataSource.manager, {
      operation: op(operationId, OperationStatus.ACKNOWLEDGED, 1),
      to: OperationStatus.VERIFIED,
    });
    expect(again.won).toBe(false);

    expect(await counterValue({ type: 'operation.status_changed', to_status: 'SENT' })).toBe(sentBefore + 1);
    expect(await counterValue({ type: 'operation.status_changed', to_status: 'VERIFIED' })).toBe(verifiedBefore + 1);
    expect(await histogramCount(intakeToVerified)).toBe(toVerifiedBefore + 1);
    expect(await histogramCount(intakeToSettled, { status: 'VERIFIED' })).toBe(settledBefore + 1);
  });

  it('counts what a transaction wrote when it commits, and nothing when it rolls back', async () => {
    const { executionId, operationId } = await newOperation();
    const label = { type: 'operation.status_changed', to_status: 'ACKNOWLEDGED' };
    const before = await counterValue(label);
    await expect(
      transaction(db.dataSource, async (tx) => {
        await sendAndAcknowledge(tx, operationId);
        throw new Error('changed my mind');
      }),
    ).rejects.toThrow('changed my mind');
    expect(await counterValue(label)).toBe(before);

    const executionLabel = { type: 'execution.status_changed', to_status: 'validating_output' };
    const executionsBefore = await counterValue(executionLabel);
    let seenInside = -1;
    await transaction(db.dataSource, async (tx) => {
      await sendAndAcknowledge(tx, operationId);
      await transitions.execution(tx, {
        executionId,
        from: ExecutionStatus.RUNNING,
        to: ExecutionStatus.VALIDATING_OUTPUT,
      });
      seenInside = await counterValue(label);
    });
    expect(seenInside).toBe(before);
    expect(await counterValue(label)).toBe(before + 1);
    expect(await counterValue(executionLabel)).toBe(executionsBefore + 1);
  });

  it('a scrape runs exactly the METRICS_SQL statements, and none of them reads the events table', async () => {
    const ran: string[] = [];
    const recording: Queryable = {
      query: (sql: string, params?: unknown[]) => {
        ran.push(sql);
        return db.dataSource.manager.query(sql, params);
      },
    } as Queryable;
    const counts = await platformCounts(recording);
    expect(ran.sort()).toEqual(Object.values(METRICS_SQL).sort());
    expect(Object.keys(counts.operations)).toEqual([...IN_FLIGHT_OPERATION_STATUSES]);

    for (const sql of ran) {
      expect(sql).not.toMatch(/\bevents\b/);
      const [{ 'QUERY PLAN': plan }] = (await db.dataSource.query(`EXPLAIN (FORMAT JSON) ${sql}`)) as {
        'QUERY PLAN': { Plan: PlanNode }[];
      }[];
      const relations = nodes(plan[0].Plan).flatMap((n) => (n['Relation Name'] ? [n['Relation Name']] : []));
      expect(relations.length).toBeGreaterThan(0);
      expect(relations).not.toContain('events');
    }
  });

  it('each scrape statement can be answered from a partial index that holds only unfinished rows', async () => {
    // With sequential scans priced out, the planner shows which index it can use: one whose predicate the statement
    // implies (executions_active, operations_unsettled), so the work grows with what is in flight, not with history.
    const runner = db.dataSource.createQueryRunner();
    try {
      await runner.startTransaction();
      await runner.query('SET LOCAL enable_seqscan = off');
      for (const sql of Object.values(METRICS_SQL)) {
        const [{ 'QUERY PLAN': plan }] = (await runner.query(`EXPLAIN (FORMAT JSON) ${sql}`)) as {
          'QUERY PLAN': { Plan: PlanNode }[];
        }[];
        const planned = nodes(plan[0].Plan);
        expect(planned.filter((n) => n['Node Type'] === 'Seq Scan')).toEqual([]);
        const indexes = planned.flatMap((n) => (n['Index Name'] ? [n['Index Name']] : []));
        expect(indexes.length).toBeGreaterThan(0);
        for (const index of indexes) expect(['executions_active', 'operations_unsettled']).toContain(index);
      }
    } finally {
      await runner.rollbackTransaction().catch(() => undefined);
      await runner.release();
    }
  });
  // A hold a reviewer released (resolution SENT) stays MANUAL_REVIEW until the dispatcher sends it; the obligation was
  // met, so an operator's alert on overdue obligations and the console's overdue count must not page anyone for it.
  it('an overdue hold counts as open and overdue until a reviewer resolves it, then in neither', async () => {
    const { operationId } = await newOperation();
    const due = new Date(Date.now() - 2 * 3600_000).toISOString();
    await db.dataSource.query(
      `UPDATE operations SET status = 'MANUAL_REVIEW', obligation = jsonb_build_object('due_at', $2::text) WHERE id = $1`,
      [operationId, due],
    );
    const before = await platformCounts(db.dataSource.manager);
    const summaryBefore = await reviewQueueCounts(db.dataSource.manager, 'acme');
    expect(before.obligations.overdue_1h_to_24h).toBeGreaterThanOrEqual(1);
    expect(summaryBefore.overdue).toBeGreaterThanOrEqual(1);

    await db.dataSource.query(
      `UPDATE operations SET obligation = obligation || jsonb_build_object('resolution', jsonb_build_object('status', 'SENT'))
        WHERE id = $1`,
      [operationId],
    );
    const after = await platformCounts(db.dataSource.manager);
    const summaryAfter = await reviewQueueCounts(db.dataSource.manager, 'acme');
    expect(after.obligations.overdue_1h_to_24h).toBe(before.obligations.overdue_1h_to_24h - 1);
    expect(summaryAfter.overdue).toBe(summaryBefore.overdue - 1);
    // Still held, as its status says: the queue still lists it, with its resolution, until it is sent.
    expect(summaryAfter.manual_reviews).toBe(summaryBefore.manual_reviews);
  });
});
