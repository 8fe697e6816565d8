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
