import { OperationStatus } from '@verity/status-model';
import { Queryable, rows, sqlLiterals } from './sql';

const S = OperationStatus;

/**
 * The workers' small writes and reads of an operation's checks: the approval baseline, the re-check schedule, and
 * when the operation last became UNKNOWN after a send. Workers act across tenants on ids the system handed them.
 */
export const CHECKS_SQL = {
  // Merged into the approval, so a decision that arrived early is kept.
  mergeApprovalBaseline: `UPDATE operations SET approval = coalesce(approval, '{}'::jsonb) || $2 WHERE id = $1`,
  // Compare-and-set on status and check_count: a check that raced this one (or a move) wins, this write does nothing.
  scheduleNextCheck: `UPDATE operations SET check_count = $3, next_check_at = $4
     WHERE id = $1 AND status = $2 AND check_count = $5`,
  lastUnknownAfterSend: `SELECT max(created_at) AS at, clock_timestamp() AS now FROM events
     WHERE operation_id = $1 AND tenant_id = $2 AND to_status = ${sqlLiterals([S.UNKNOWN])}
       AND from_status IN (${sqlLiterals([S.SENT, S.ACKNOWLEDGED])})`,
} as const;

/** Remembers what the source looked like when approval was asked for: an approval is stale if it changes. */
export async function recordApprovalBaseline(
  db: Queryable,
  operationId: string,
  baseline: Record<string, unknown>,
): Promise<void> {
  await rows(db, CHECKS_SQL.mergeApprovalBaseline, [operationId, JSON.stringify({ baseline })]);
}

/** The next check of an operation: its count and when it is owed, while it is still in `status` at `checkCount`. */
export async function scheduleNextCheck(
  db: Queryable,
  op: { id: string; status: OperationStatus; checkCount: number },
  nextCheckAt: Date,
): Promise<void> {
  await rows(db, CHECKS_SQL.scheduleNextCheck, [op.id, op.status, op.checkCount + 1, nextCheckAt, op.checkCount]);
}

/**
 * When the operation last became UNKNOWN straight after a send (SENT or ACKNOWLEDGED), or null, and the database's
 * clock at that read: event times are the database's, so a caller compares them with this, not with its own clock
 * (an API or worker host whose clock runs ahead would otherwise believe a bound passed early). Tenant-scoped: the API
 * asks it too (a reviewer's FAILED waits for the same bound as the reconciler's).
 */
export async function lastUnknownAfterSend(
  db: Queryable,
  op: { id: string; tenantId: string },
): Promise<{ lastUnknownAt: Date | null; databaseNow: Date }> {
  const [row] = await rows<{ at: Date | null; now: Date }>(db, CHECKS_SQL.lastUnknownAfterSend, [op.id, op.tenantId]);
  return { lastUnknownAt: row.at ? new Date(row.at) : null, databaseNow: new Date(row.now) };
}
