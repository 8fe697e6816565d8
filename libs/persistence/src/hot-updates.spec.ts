import { ExecutionStatus, OperationStatus, VerificationMethod } from '@verity/status-model';
import { EntityManager } from 'typeorm';
import { insertChargeExecution } from '../../../test/support/fixtures';
import { useTestDatabase } from '../../../test/support/test-database';
import { TransitionService } from './transition.service';

interface Updates {
  executions: { updated: number; hot: number };
  operations: { updated: number; hot: number };
}

/**
 * Row updates counted so far, and how many were HOT, from Postgres' per-transaction statistics. Those also hold what
 * this session did in earlier transactions and has not reported yet, so a test takes the difference of two readings
 * in one transaction (nothing is reported mid-transaction).
 */
async function updatesSoFar(tx: EntityManager): Promise<Updates> {
  const found = (await tx.query(
    `SELECT relname, n_tup_upd::int AS updated, n_tup_hot_upd::int AS hot FROM pg_stat_xact_user_tables
      WHERE relname IN ('executions', 'operations')`,
  )) as { relname: 'executions' | 'operations'; updated: number; hot: number }[];
  const out: Updates = { executions: { updated: 0, hot: 0 }, operations: { updated: 0, hot: 0 } };
  for (const row of found) out[row.relname] = { updated: row.updated, hot: row.hot };
  return out;
}

/**
 * Issue 18: cheaper rows. An UPDATE is HOT (no new entry in any index) only when it changes no indexed column. Every
 * operation transition also bumps its execution's `event_seq` (and `updated_at`); with `updated_at` out of the
 * partial index `executions_active` (migration 1764530000000), that bump is HOT. A move of `status` cannot be: the
 * column is indexed, and must be.
 */
describe('HOT updates on the happy path (real Postgres)', () => {
  const db = useTestDatabase('hotupdates', ['acme']);
  const transitions = new TransitionService();

  it("an operation's moves bump its execution in place; only status changes add index entries", async () => {
    const { executionId, operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    await db.dataSource.query(`UPDATE executions SET status = 'running' WHERE id = $1`, [executionId]);
    const op = (status: OperationStatus) => ({
      id: operationId,
      status,
      attempt: 1,
      verificationMethod: VerificationMethod.READ_AFTER_WRITE,
    });

    const updates = await db.dataSource.transaction(async (tx) => {
      const before = await updatesSoFar(tx);
      const sent = await transitions.operation(tx, {
        operation: { ...op(OperationStatus.PREPARED), attempt: 0 },
        to: OperationStatus.SENT,
        bumpAttempt: true,
        sendGuard: { kind: 'dispatch', approvalRequired: false },
        patch: { sent_at: 'now' },
      });
      const acknowledged = await transitions.operation(tx, {
        operation: op(OperationStatus.SENT),
        to: OperationStatus.ACKNOWLEDGED,
        patch: { evidence: { status: 201 } },
      });
      const verified = await transitions.operation(tx, {
        operation: op(OperationStatus.ACKNOWLEDGED),
        to: OperationStatus.VERIFIED,
        patch: { evidence: { read_back: { charged: true } } },
      });
      const completed = await transitions.executionMoves(tx, {
        executionId,
        from: ExecutionStatus.RUNNING,
        moves: [{ to: ExecutionStatus.VALIDATING_OUTPUT }, { to: ExecutionStatus.COMPLETED }],
      });
      expect([sent.won, acknowledged.won, verified.won, completed.won]).toEqual([true, true, true, true]);
      const after = await updatesSoFar(tx);
      return {
        executions: {
          updated: after.executions.updated - before.executions.updated,
          hot: after.executions.hot - before.executions.hot,
        },
        operations: {
          updated: after.operations.updated - before.operations.updated,
          hot: after.operations.hot - before.operations.hot,
        },
      };
    });

    // Three event_seq bumps (HOT) and one status change of the execution; three status changes of the operation.
    expect(updates).toEqual({ executions: { updated: 4, hot: 3 }, operations: { updated: 3, hot: 0 } });
  });
});
