/**
 * Which automatic step an operation is owed, as data both the workers (TypeScript) and the sweeper's statements (SQL,
 * libs/persistence) read, so the two cannot disagree. Imports nothing but the status tables.
 */
import { OperationStatus, VerificationMethod, VerificationMethodValue } from './operation';

const S = OperationStatus;

/** The kinds of check an operation can be owed: a read-back, a reconciliation, a re-check of a held operation. */
export type OwedCheck = 'verify' | 'reconcile' | 'recheck';

/** ACKNOWLEDGED with a read-back declared: owed its verification. */
export const VERIFY_OWED_STATUSES: readonly OperationStatus[] = [S.ACKNOWLEDGED];
/** The outcome is not known: owed reconciliation until the source says. */
export const RECONCILE_OWED_STATUSES: readonly OperationStatus[] = [S.UNKNOWN, S.RECONCILING];
/** Held for a human, and owed a re-check only while one is scheduled (next_check_at set). */
export const RECHECK_OWED_STATUSES: readonly OperationStatus[] = [S.MANUAL_REVIEW];

/**
 * The check an operation in this status is owed, or null. `recheckScheduled` is whether a re-check of a held
 * operation is scheduled (the row, not a queue, says it is owed).
 */
export function owedCheck(op: {
  status: OperationStatus;
  verificationMethod: VerificationMethodValue;
  recheckScheduled: boolean;
}): OwedCheck | null {
  if (VERIFY_OWED_STATUSES.includes(op.status)) {
    return op.verificationMethod === VerificationMethod.READ_AFTER_WRITE ? 'verify' : null;
  }
  if (RECONCILE_OWED_STATUSES.includes(op.status)) return 'reconcile';
  if (RECHECK_OWED_STATUSES.includes(op.status)) return op.recheckScheduled ? 'recheck' : null;
  return null;
}

/** Whether the operation was ever handed to its connector (a send was attempted, whatever came of it). */
export function everSent(op: { attempt: number }): boolean {
  return op.attempt > 0;
}
