import { ExecutionStatus, OperationForChange, canStillChange, isTerminalExecution } from '@verity/status-model';

/** Why a stream ended (`event: end`, data `{ "reason": … }`). */
export type StreamEndReason = 'settled' | 'deadline' | 'key_revoked';

export interface StreamState {
  executionStatus: ExecutionStatus;
  deadlineAt: Date;
  operations: readonly OperationForChange[];
  /** The stored outcome is what the criteria give now (libs/status-model `isOutcomeCurrent`). */
  outcomeCurrent: boolean;
  /**
   * Until when a read of the source begun before a person's FAILED may still land on it (libs/status-model
   * `lateReadUntil`; on the database's clock, as `now` is): a re-check that finds the effect writes it onto the FAILED
   * operation (`operation.rechecked`, `after: "FAILED"`), which changes its commit, its retry rule and the criteria's
   * verdicts. Null: none may.
   */
  lateReadUntil?: Date | null;
}

export type StreamVerdict = { end: 'settled' | 'deadline' } | { end: null; wakeAt: Date | null };

/**
 * Whether a stream ends now, from the execution as last read (the key's revocation is asked separately). `now` is the
 * database's clock at that read: the deadline and a resolution's time were stamped by it, not by the API's host.
 *
 * - `settled`: nothing can change any more (libs/status-model `canStillChange`), the outcome included: an evaluation
 *   still owed after the last change (it follows in the dispatcher's next step) keeps the stream open for it, and so
 *   does a re-check's read that may still land on an operation a person has just resolved FAILED (`lateReadUntil`).
 * - `deadline`: the execution is terminal and its deadline has passed, yet something can still change — an operation
 *   held for a human, or one still being reconciled. The stream does not outlive the execution's own deadline;
 *   whoever still waits polls (or reads the obligation). A non-terminal execution past its deadline is about to be
 *   expired by the lifecycle: the stream stays to deliver that.
 * - otherwise the stream stays open; `wakeAt` is when the deadline will end it, so it is not missed by a long wait.
 */
export function streamVerdict(state: StreamState, now: Date): StreamVerdict {
  if (!canStillChange(state.executionStatus, state.operations) && state.outcomeCurrent) {
    // Settled as read, but a read of the source made before a person's FAILED may still land on it: not yet.
    const late = state.lateReadUntil;
    if (late && late.getTime() > now.getTime()) return { end: null, wakeAt: late };
    return { end: 'settled' };
  }
  if (!isTerminalExecution(state.executionStatus)) return { end: null, wakeAt: null };
  if (state.deadlineAt.getTime() <= now.getTime()) return { end: 'deadline' };
  return { end: null, wakeAt: state.deadlineAt };
}

/**
 * Event types that never move an execution's status: only `execution.status_changed` does (in the statement that
 * moves it, libs/persistence transition.service), and `execution.created` begins it. A type not listed here (a new
 * one) counts as one that may.
 */
const STATUS_UNMOVED_BY: ReadonlySet<string> = new Set([
  'operation.status_changed',
  'operation.resolved',
  'operation.release_withdrawn',
  'operation.acknowledged_late',
  'operation.rejected_late',
  'operation.rechecked',
  'operation.still_unknown',
  'operation.observed',
  'spending_cap.exceeded',
  'approval.requested',
  'approval.decided',
  'approval.stale_authority',
  'approval.stale_baseline',
  'context.unavailable',
  'send.secrets_unopened',
  'context.read',
  'knowledge.conflict',
  'obligation.escalated',
  'outcome.evaluated',
]);

const NON_TERMINAL_STATUSES: ReadonlySet<string> = new Set(
  Object.values(ExecutionStatus).filter((status) => !isTerminalExecution(status)),
);

/**
 * Whether a stream must read the execution again (for `streamVerdict`) after sending `page`, given the execution's
 * status at its last read (`undefined`: no read yet — a stream's first pass, a reconnection's included; `null`: the
 * last read found no execution). Events sent since that read without one are passed too (a full page is followed by
 * the next before any read).
 *
 * While the execution is not terminal the verdict is `{ end: null, wakeAt: null }` whatever its operations, outcome or
 * deadline: only a move of the execution to a terminal status changes it, and that move writes its
 * `execution.status_changed` in the same statement, so it is in a page sent after the read. Once the last read found
 * it terminal, every pass reads: an operation settling, an evaluation, a reviewer's FAILED (which opens a late-read
 * window, `lateReadUntil`), the deadline or the end of that window may each end the stream or move its wake-up.
 */
export function streamMustRead(
  lastRead: ExecutionStatus | null | undefined,
  page: readonly { type: string; toStatus: string | null }[],
): boolean {
  if (lastRead === undefined || lastRead === null || isTerminalExecution(lastRead)) return true;
  return page.some((event) =>
    event.type === 'execution.status_changed'
      ? event.toStatus === null || !NON_TERMINAL_STATUSES.has(event.toStatus)
      : !STATUS_UNMOVED_BY.has(event.type),
  );
}
