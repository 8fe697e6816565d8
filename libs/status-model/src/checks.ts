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

/**
 * Sent, and not settled: the effect may exist and nothing has said whether it does (SENT in flight, UNKNOWN,
 * RECONCILING, or held in MANUAL_REVIEW after a send — `everSent`). ACKNOWLEDGED is not among them: the provider took
 * the request, which is known. While such an operation names an effect by the caller's own reference at a provider
 * that does not deduplicate (a connector's `resendReference`, the SMS `client_ref`), a new operation naming the same
 * reference would be a blind re-send of it (I5 across executions): intake refuses it, `409 reference-unsettled`.
 */
export const RESEND_BLOCKING_STATUSES: readonly OperationStatus[] = [S.SENT, S.UNKNOWN, S.RECONCILING, S.MANUAL_REVIEW];

/** Whether a new operation naming this one's reference would be a blind re-send of it (RESEND_BLOCKING_STATUSES). */
export function blocksResend(op: { status: OperationStatus; attempt: number }): boolean {
  return RESEND_BLOCKING_STATUSES.includes(op.status) && everSent(op);
}

/** How a held operation's automatic re-checks are spaced: RECHECK_BACKOFF_MS doubling, at most RECHECK_BACKOFF_MAX_MS. */
export interface RecheckBackoff {
  backoffMs: number;
  backoffMaxMs: number;
}

/** The delay before a hold's `rechecks`-th automatic re-check (0: the first, set as it is held), doubling, capped. */
export function recheckDelayMs(rechecks: number, limits: RecheckBackoff): number {
  return Math.min(limits.backoffMaxMs, limits.backoffMs * 2 ** Math.max(0, rechecks));
}

/**
 * How far a scheduled re-check that could not read (its connector reads back no more, or the hold is decided with its
 * re-check still set) moves the hold's next one on, from now: as long again as the hold has gone unread —
 * `unreadForMs`, since it was last written (every read of it is a write; a postponement is not) — at least the delay
 * its next read would have had (`recheckDelayMs` of the re-check it would have been) and at most the maximum. Each
 * consecutive unread re-check run when due so doubles the wait: a hold unread since its last write `u` ago is next
 * due at `2u` after it, then `4u`… A read (a connector deployed again), a "still unknown", or any other write to the
 * hold starts it over.
 * Never past the obligation's due time while it is ahead (`dueInMs`: how far ahead): the chain's own re-checks stop at
 * it, its last one before, so a connector deployed again before the hold escalates reads it by then. Once due, the wait
 * stands (the chain has nothing past it to keep; a deploy that can read revives it).
 */
export function unreadRecheckDelayMs(
  hold: { rechecks: number; unreadForMs: number; dueInMs?: number },
  limits: RecheckBackoff,
): number {
  const wait = Math.min(limits.backoffMaxMs, Math.max(recheckDelayMs(hold.rechecks + 1, limits), hold.unreadForMs));
  return hold.dueInMs !== undefined && hold.dueInMs > 0 ? Math.min(wait, hold.dueInMs) : wait;
}
