import { databaseNow, type OperationEntity, type Queryable } from '@verity/persistence';
import { approvalRequestWaits } from '@verity/status-model';

/**
 * The database's clock now, read only where one of `ops` has an approval request that still waits: such a request is
 * shown withdrawn once its execution's deadline has passed, and that deadline is on the database's clock — the one an
 * approve is refused by — not on this host's, which may be off by any amount. Undefined (no read) otherwise.
 */
export async function databaseNowForApprovals(
  db: Queryable,
  ops: readonly Pick<OperationEntity, 'status' | 'approval'>[],
): Promise<Date | undefined> {
  if (!ops.some((op) => approvalRequestWaits(op.status, op.approval?.state))) return undefined;
  return databaseNow(db);
}

/** An execution's deadline has passed by `databaseNow` (databaseNowForApprovals); false where either is not known. */
export function pastDeadlineAt(deadline: Date | undefined, databaseNow: Date | undefined): boolean {
  return deadline !== undefined && databaseNow !== undefined && deadline.getTime() <= databaseNow.getTime();
}
