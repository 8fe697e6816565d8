/**
 * What a send needs, as data both the dispatcher (TypeScript) and the SENT statement (SQL, libs/persistence) read, so
 * the two can never disagree on which statuses count. Imports nothing but the status tables.
 */
import { EXECUTION_STATUSES, ExecutionStatus } from './execution';
import {
  OperationStatus,
  VerificationMethod,
  VerificationMethodValue,
  isFinalOperation,
  isSettledOperation,
} from './operation';
import { everSent } from './checks';

/**
 * The execution statuses in which an operation may be committed SENT by the lifecycle. The lifecycle moves the
 * execution to `running` whenever it hands out a dispatch, so a dispatch job that finds it anywhere else (waiting for
 * approval, cancelled, expired, still planning) is stray or stale. A human release of a held operation is not bound
 * to it (the human decided; the execution may already have completed around the held operation).
 */
export const SENDABLE_EXECUTION_STATUSES: readonly ExecutionStatus[] = [ExecutionStatus.RUNNING];

/**
 * The ends the caller, the deadline or a failure chose, after which nothing more is sent for the execution, whoever
 * asks; with the cause an operation of it that can no longer be sent is cancelled for (each a failure code of its own,
 * failure.ts). An execution fails only at validation (an invalid request), so a failed one names that, as the cancels
 * of its PREPARED operations do.
 */
export const CANCEL_CAUSE_OF_ENDED_EXECUTION = {
  [ExecutionStatus.CANCELLED]: 'execution_cancelled',
  [ExecutionStatus.EXPIRED]: 'execution_expired',
  [ExecutionStatus.FAILED]: 'execution_invalid',
} as const satisfies Partial<Record<ExecutionStatus, string>>;

export type EndedExecutionCancelCause =
  (typeof CANCEL_CAUSE_OF_ENDED_EXECUTION)[keyof typeof CANCEL_CAUSE_OF_ENDED_EXECUTION];

/**
 * The execution statuses in which a human's release of a held, never-sent operation may still be sent: any but an end
 * that the caller, the deadline or a failure chose (CANCEL_CAUSE_OF_ENDED_EXECUTION) — after such an end nothing more
 * is sent for the execution, whoever asks. A completed execution may have completed around the held operation: the
 * reviewer's release is carried out.
 */
export const RELEASABLE_EXECUTION_STATUSES: readonly ExecutionStatus[] = EXECUTION_STATUSES.filter(
  (status) => !(status in CANCEL_CAUSE_OF_ENDED_EXECUTION),
);

/**
 * The cause a held, never-sent operation of an execution in `status` is cancelled for (see heldNeverSent), or null
 * while the execution may still carry out a release of it (RELEASABLE_EXECUTION_STATUSES).
 */
export function cancelCauseOfEndedExecution(status: ExecutionStatus): EndedExecutionCancelCause | null {
  return status in CANCEL_CAUSE_OF_ENDED_EXECUTION
    ? CANCEL_CAUSE_OF_ENDED_EXECUTION[status as keyof typeof CANCEL_CAUSE_OF_ENDED_EXECUTION]
    : null;
}

/**
 * A held operation that was never sent: once its execution has ended unreleasable (a status outside
 * RELEASABLE_EXECUTION_STATUSES), no release of it can be carried out, and it is cancelled with the execution (after
 * the execution's move, by a statement that checks that end) rather than left in the review queue.
 */
export function heldNeverSent(op: { status: OperationStatus; attempt: number }): boolean {
  return op.status === OperationStatus.MANUAL_REVIEW && !everSent(op);
}

/** A dependency is done when its effect is VERIFIED … */
export const DEPENDENCY_DONE_STATUSES: readonly OperationStatus[] = [OperationStatus.VERIFIED];
/** … or ACKNOWLEDGED where nothing can read it back (its honest end). */
export const DEPENDENCY_DONE_WITHOUT_READ_BACK_STATUSES: readonly OperationStatus[] = [OperationStatus.ACKNOWLEDGED];

/**
 * A VERIFIED whose send the provider answered it rejected, that answer coming back after the VERIFIED was written
 * (`rejected_at` on file): the status stays, but whether the effect happened is no longer established (its commit is
 * `unknown`). Dependants are sent on the word that it happened, and nothing will establish it again: for them it is a
 * dependency that will never be done.
 */
function verifiedContradicted(dep: { status: OperationStatus; rejectedAt?: Date | string | null }): boolean {
  return dep.status === OperationStatus.VERIFIED && dep.rejectedAt != null;
}

/** Has a dependency reached what its dependants need before they may be sent? */
export function dependencySatisfied(dep: {
  status: OperationStatus;
  verificationMethod: VerificationMethodValue;
  rejectedAt?: Date | string | null;
}): boolean {
  if (verifiedContradicted(dep)) return false;
  if (DEPENDENCY_DONE_STATUSES.includes(dep.status)) return true;
  return (
    DEPENDENCY_DONE_WITHOUT_READ_BACK_STATUSES.includes(dep.status) &&
    dep.verificationMethod !== VerificationMethod.READ_AFTER_WRITE
  );
}

/** Are all of an operation's dependencies done? (A dependency that does not exist is not: pass undefined.) */
export function dependenciesDone(dependencies: readonly (DependencyView | undefined)[]): boolean {
  return dependencies.every((d) => d !== undefined && dependencySatisfied(d));
}

/**
 * Each key's latest generation among an execution's operations, given in position and generation order (as they are
 * read): what a dependency or a criterion naming that key refers to.
 */
export function latestByKey<T extends { key: string }>(operations: readonly T[]): Map<string, T> {
  const latest = new Map<string, T>();
  for (const op of operations) latest.set(op.key, op);
  return latest;
}

/** Where an operation's dependencies stand: all done, one broken for good (see dependencyBroken), or still waiting. */
export type DependenciesState = 'done' | 'waiting' | 'broken';

export function dependenciesState(dependencies: readonly (DependencyView | undefined)[]): DependenciesState {
  if (dependencies.some((d) => dependencyBroken(d))) return 'broken';
  return dependenciesDone(dependencies) ? 'done' : 'waiting';
}

/** A dependency in one of these can never be done any more: its dependants are cancelled, never sent. */
export const DEPENDENCY_BROKEN_STATUSES: readonly OperationStatus[] = [
  OperationStatus.FAILED,
  OperationStatus.CANCELLED,
];

/**
 * Will this dependency never be satisfied? (A dependency that does not exist is broken too: pass undefined; so is a
 * VERIFIED the provider's late rejection contradicted since.)
 */
export function dependencyBroken(
  dep: { status: OperationStatus; rejectedAt?: Date | string | null } | undefined,
): boolean {
  return dep === undefined || DEPENDENCY_BROKEN_STATUSES.includes(dep.status) || verifiedContradicted(dep);
}

export interface PreconditionReadBudget {
  /** How many failed reads in total before the operation is held for a human. */
  budget: number;
  backoffMs: number;
  backoffMaxMs: number;
}

export type PreconditionReadNext =
  { kind: 'retry'; at: Date; failedReads: number } | { kind: 'hold'; failedReads: number; why: 'budget' | 'deadline' };

/**
 * I15, no blind send: after a failed read of an irreversible operation's precondition, either read again later
 * (exponential backoff, capped) or hold it for a human — when this was the last read the budget allows, or when the
 * next read could only happen at or after the execution's deadline (it would then be cancelled unread, and the agent
 * would learn nothing of why).
 */
export function nextPreconditionRead(
  failedBefore: number,
  limits: PreconditionReadBudget,
  now: Date,
  deadline: Date,
): PreconditionReadNext {
  const failedReads = failedBefore + 1;
  if (failedReads >= limits.budget) return { kind: 'hold', failedReads, why: 'budget' };
  const delay = Math.min(limits.backoffMaxMs, limits.backoffMs * 2 ** (failedReads - 1));
  const at = new Date(now.getTime() + delay);
  if (at.getTime() >= deadline.getTime()) return { kind: 'hold', failedReads, why: 'deadline' };
  return { kind: 'retry', at, failedReads };
}

/** A dependency as the lifecycle sees it: the operation with that key, or undefined when there is none. */
export type DependencyView = {
  key: string;
  status: OperationStatus;
  verificationMethod: VerificationMethodValue;
  /** When the provider's rejection of its send came back after it was written (null: none on file). */
  rejectedAt?: Date | string | null;
};

/** The approval a PREPARED operation carries, if any. */
export type ApprovalStateValue = 'requested' | 'granted' | 'denied';

export type PreparedStep =
  /**
   * A retry whose chain of retries holds a FAILED contradicted since (`retryRefuted`): cancelled `retry_refuted`, never
   * sent, and never asked an approval for.
   */
  | { kind: 'refuted' }
  /** A dependency can never be done (failed, cancelled, or missing): cancelled, never sent. */
  | { kind: 'cancel'; dependency: DependencyView | undefined }
  /** A dependency is not done yet: nothing to do now. */
  | { kind: 'wait' }
  /** Its approval was denied: cancelled (DENIAL). */
  | { kind: 'deny' }
  /** It needs an approval not granted yet; `request` when none was asked for. */
  | { kind: 'await-approval'; request: boolean }
  /** An irreversible operation's precondition is owed a read before it may be sent. */
  | { kind: 'read-precondition' }
  /** It may be handed to the dispatcher. */
  | { kind: 'ready' };

/**
 * What the lifecycle does next with one PREPARED operation, in the order the contract sets: a retry made on the word of
 * a FAILED contradicted since (`retryRefuted`: the one it retries, or one up its chain of retries — the provider's 2xx
 * came back late, or its source showed the effect) is cancelled before anything else is asked — its send guard would
 * refuse it whatever happens next, so no reviewer is asked to approve it and nothing waits for its dependencies; a
 * broken dependency cancels it; an unfinished one makes it wait; an approval it needs must be granted (a deny cancels it); an owed
 * precondition read comes before the send (I15); then it is ready. An approval asked for or denied is owed its decision
 * even where no longer required (an admin removed the rule meanwhile), as the SENT statement's guard judges it: taking
 * it for ready would have the guard refuse the send again and again while the execution showed running.
 */
export function preparedStep(op: {
  dependencies: (DependencyView | undefined)[];
  approvalRequired: boolean;
  approvalState: ApprovalStateValue | null | undefined;
  preconditionOwed: boolean;
  /** A retry whose chain of retries holds a FAILED contradicted since (persistence `refutedRetries`). */
  retryRefuted?: boolean;
}): PreparedStep {
  if (op.retryRefuted) return { kind: 'refuted' };
  if (op.dependencies.some((d) => dependencyBroken(d))) {
    return { kind: 'cancel', dependency: op.dependencies.find((d) => dependencyBroken(d)) };
  }
  if (!dependenciesDone(op.dependencies)) return { kind: 'wait' };
  if (op.approvalRequired || op.approvalState === 'requested' || op.approvalState === 'denied') {
    if (op.approvalState === 'denied') return { kind: 'deny' };
    if (op.approvalState !== 'granted') return { kind: 'await-approval', request: op.approvalState !== 'requested' };
  }
  if (op.preconditionOwed) return { kind: 'read-precondition' };
  return { kind: 'ready' };
}

/**
 * Where a started execution stands once this look at its operations changed none of them: complete when every
 * operation is settled; running while dispatches are handed out; waiting for approval when only approvals hold it
 * (nothing in flight); otherwise waiting for its tools (effects in flight, or operations waiting on them).
 */
export function startedExecutionTarget(state: {
  operations: { status: OperationStatus; verificationMethod: VerificationMethodValue }[];
  dispatched: number;
  awaitingApproval: number;
}): 'complete' | ExecutionStatus.RUNNING | ExecutionStatus.WAITING_FOR_APPROVAL | ExecutionStatus.WAITING_FOR_TOOL {
  const settled = (op: { status: OperationStatus; verificationMethod: VerificationMethodValue }) =>
    isSettledOperation(op.status, op.verificationMethod);
  if (state.operations.every(settled)) return 'complete';
  if (state.dispatched > 0) return ExecutionStatus.RUNNING;
  const inFlight = state.operations.some((op) => op.status !== OperationStatus.PREPARED && !settled(op));
  if (state.awaitingApproval > 0 && !inFlight) return ExecutionStatus.WAITING_FOR_APPROVAL;
  return ExecutionStatus.WAITING_FOR_TOOL;
}

/**
 * Whether an operation's VERIFIED, written when the read right after its send concludes, completes its execution — so
 * the completion can be written in the same statement: nothing to judge (no criteria), and every other operation
 * final (nothing moves a final operation again, so the sender's view of them is current). Exactly when the step after
 * the send would find the execution complete without reading anything again.
 */
export function completesWhenVerified(state: {
  criteria: number;
  operation: { verificationMethod: VerificationMethodValue };
  others: { status: OperationStatus; verificationMethod: VerificationMethodValue }[];
}): boolean {
  if (state.criteria > 0) return false;
  if (!state.others.every((op) => isFinalOperation(op.status, op.verificationMethod))) return false;
  const after = [
    ...state.others,
    { status: OperationStatus.VERIFIED, verificationMethod: state.operation.verificationMethod },
  ];
  return startedExecutionTarget({ operations: after, dispatched: 0, awaitingApproval: 0 }) === 'complete';
}

/**
 * Whether a quiet preparation (nothing to write but the moves to running: `preparesWithoutWrites`) writes those moves
 * in the statement that commits its operation's SENT instead of in a statement of their own: exactly one operation,
 * ready the moment the execution runs (nothing it depends on, no approval asked for, recorded or required, no
 * precondition read owed) and under no spending cap — a cap's refusal cancels the operation, and the history must
 * show that after the moves. Anything else is written as before: the moves first, then the sends.
 */
export function sendsWithPreparation(
  operations: {
    status: OperationStatus;
    dependsOn: readonly string[];
    approvalRequired: boolean;
    approvalState: ApprovalStateValue | null | undefined;
    preconditionOwed: boolean;
    capped: boolean;
  }[],
): boolean {
  if (operations.length !== 1) return false;
  const [op] = operations;
  if (op.status !== OperationStatus.PREPARED || op.dependsOn.length > 0 || op.capped || op.approvalState) return false;
  const next = preparedStep({
    dependencies: [],
    approvalRequired: op.approvalRequired,
    approvalState: op.approvalState,
    preconditionOwed: op.preconditionOwed,
  });
  return next.kind === 'ready';
}

export type SendStart =
  /** Already SENT, found by a dispatch job (a crash, a stalled or duplicate job): never called again (I3); UNKNOWN. */
  | { kind: 'orphan' }
  /**
   * Already SENT, found by an advance job sending in-process: most likely another advance job of the execution that
   * saw it ready at the same moment is sending it now (advance jobs have no per-operation id that would deduplicate
   * them, as a dispatch job's does). Never called again (I3), and left alone: a real orphan is the sweeper's.
   */
  | { kind: 'sending-elsewhere' }
  /** A reviewer released a never-sent held operation (resolution SENT): sent under the release guard. */
  | { kind: 'release' }
  /** PREPARED: sent under the dispatch guard (the SENT statement checks what a send needs). */
  | { kind: 'dispatch' }
  /** Anything else: it moved since the job was made; nothing is sent. */
  | { kind: 'moved' };

/** What a sender found, before anything is tried. */
export function sendStart(op: {
  status: OperationStatus;
  attempt: number;
  /** The status of the resolution recorded on its obligation, if any. */
  resolutionStatus: string | null | undefined;
  /** Which job sends: the operation's own dispatch job, or an advance job sending the operation it found ready. */
  sender: 'dispatch-job' | 'advance-job';
}): SendStart {
  if (op.status === OperationStatus.SENT)
    return { kind: op.sender === 'dispatch-job' ? 'orphan' : 'sending-elsewhere' };
  if (op.status === OperationStatus.MANUAL_REVIEW && !everSent(op) && op.resolutionStatus === OperationStatus.SENT) {
    return { kind: 'release' };
  }
  if (op.status === OperationStatus.PREPARED) return { kind: 'dispatch' };
  return { kind: 'moved' };
}

/**
 * May the connector still be called after SENT was committed? The sweeper declares a SENT operation orphaned (UNKNOWN,
 * then reconciled) only when no worker holds its job's lock AND the lock window plus the send grace have passed since
 * SENT. So calling is safe within the grace of starting the SENT commit, or while the worker still holds the lock
 * (`lockOwned` true); a worker frozen longer whose lock ran out (false) or cannot tell (null) does not call: its
 * operation may already be on its way to a "proven absent" verdict.
 */
export function mayStillCall(state: {
  sinceCommitStartMs: number;
  graceMs: number;
  lockOwned: boolean | null;
}): { call: true } | { call: false; why: string } {
  if (state.sinceCommitStartMs <= state.graceMs || state.lockOwned === true) return { call: true };
  return {
    call: false,
    why: `${state.sinceCommitStartMs} ms since SENT and ${
      state.lockOwned === false ? 'the dispatch job lock was lost' : 'the job lock cannot be checked'
    }`,
  };
}

/**
 * Where a provider's 2xx that lost its ACKNOWLEDGED compare-and-set (the sweeper marked the send UNKNOWN first) is still
 * recorded on the operation (`acknowledged_at`, its reference, an `operation.acknowledged_late` event): wherever its
 * outcome is still to be decided — by the reconciler (UNKNOWN, RECONCILING: an absent read is then no proof) or by a
 * person (MANUAL_REVIEW, where an operation that cannot be read back is held at once: a person's FAILED is then refused,
 * I14) — and on a FAILED one, whose "no effect exists" the provider's word now refutes: the status is final and stays,
 * the event says `after: "FAILED"`, and a retry is refused (`retryRefusedByAcknowledgement`). VERIFIED and ACKNOWLEDGED
 * already say the effect exists; CANCELLED was never sent.
 */
export const LATE_ACKNOWLEDGEMENT_STATUSES: readonly OperationStatus[] = [
  OperationStatus.UNKNOWN,
  OperationStatus.RECONCILING,
  OperationStatus.MANUAL_REVIEW,
  OperationStatus.FAILED,
];

/**
 * The compare-and-sets that record a late acknowledgement, tried in this order until one wins: one statement for
 * UNKNOWN or RECONCILING (which move back and forth while the reconciler reads), then MANUAL_REVIEW, then FAILED.
 * Between these groups an operation only moves forward, so trying them in order cannot miss it. Tried one status at a
 * time, an operation that went from RECONCILING back to UNKNOWN between the first two statements was in none when
 * each was tried, and the provider's 2xx was dropped (a person's FAILED was then accepted, and a retry sent again).
 */
export const LATE_ACKNOWLEDGEMENT_TRIES: readonly (readonly OperationStatus[])[] = [
  [OperationStatus.UNKNOWN, OperationStatus.RECONCILING],
  [OperationStatus.MANUAL_REVIEW],
  [OperationStatus.FAILED],
];

/**
 * Where a send's explicit failure that lost its FAILED compare-and-set (the sweeper marked the send UNKNOWN first) is
 * still recorded — on the operation (`rejected_at`, `rejection`: the provider's answer as classified) and as an
 * `operation.rejected_late` event, in one statement: wherever its outcome is still to be decided — by the reconciler
 * (UNKNOWN, RECONCILING) or by a person (MANUAL_REVIEW, where an operation that cannot be read back is held at once, and
 * a person's VERIFIED is then refused: `refusedWhenRejected`) — and on a VERIFIED one, which the provider's answer now
 * contradicts: the status is final and stays, the event says `after: "VERIFIED"`, and its commit is `unknown`
 * (`verificationContradicted`). It changes no status. A FAILED operation already says what the provider said; CANCELLED
 * was never sent: the answer is then only logged.
 */
export const LATE_REJECTION_TRIES: readonly (readonly OperationStatus[])[] = [
  // UNKNOWN and RECONCILING in one compare-and-set: they move back and forth while the reconciler reads.
  [OperationStatus.UNKNOWN, OperationStatus.RECONCILING],
  [OperationStatus.MANUAL_REVIEW],
  [OperationStatus.VERIFIED],
];

/** The check a send's outcome is owed: a read-back of an acknowledged effect, a reconciliation of an unknown one. */
export function checkAfterSend(outcome: {
  status: OperationStatus;
  verificationMethod: VerificationMethodValue;
}): 'verify' | 'reconcile' | null {
  if (outcome.status === OperationStatus.ACKNOWLEDGED) {
    return outcome.verificationMethod === VerificationMethod.READ_AFTER_WRITE ? 'verify' : null;
  }
  return outcome.status === OperationStatus.UNKNOWN ? 'reconcile' : null;
}

/** The first wait before a provider's answer is written again, doubled after each failed try up to the maximum. */
export const ANSWER_WRITE_BACKOFF_MS = 250;
export const ANSWER_WRITE_BACKOFF_MAX_MS = 5_000;

/**
 * After `tries` writes of a provider's answer that Postgres could not take (unreachable, restarting, timed out): whether
 * to try again, and after how long. The answer exists nowhere else (the provider's reference, its rejection), and the
 * send's job holds its lock while it waits, so the sweeper leaves the operation SENT: it is tried again with backoff as
 * long as the next try starts within `limitMs` of the first failure — and not once the process is stopping (its drain
 * is bounded; the operation is then the sweeper's to hold as UNKNOWN).
 */
export function answerWriteRetry(state: {
  tries: number;
  sinceFirstFailureMs: number;
  limitMs: number;
  stopping: boolean;
}): { again: true; waitMs: number } | { again: false } {
  if (state.stopping) return { again: false };
  const waitMs = Math.min(ANSWER_WRITE_BACKOFF_MAX_MS, ANSWER_WRITE_BACKOFF_MS * 2 ** Math.max(0, state.tries - 1));
  if (state.sinceFirstFailureMs + waitMs > state.limitMs) return { again: false };
  return { again: true, waitMs };
}
