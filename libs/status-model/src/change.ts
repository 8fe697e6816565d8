/**
 * What can still change: the question a live stream (and anyone waiting on an execution) asks. Wider than "settled"
 * (isSettledOperation), which counts a hold for a human as the end of the automatic life: here a MANUAL_REVIEW is
 * still open, because a reviewer's resolution will move it.
 */
import { ExecutionStatus, isTerminalExecution } from './execution';
import { OperationStatus, VerificationMethodValue, isFinalOperation } from './operation';
import { Criterion, CriterionVerdict, OperationForCriterion, evaluateCriterion } from './outcome';

export interface OperationForChange {
  status: OperationStatus;
  verificationMethod: VerificationMethodValue;
}

/**
 * True while the execution or any of its operations can still move: the execution is not terminal (its pending
 * approvals included), or an operation is held for a human (MANUAL_REVIEW), in flight or being reconciled — which
 * a cancelled or expired execution's sent operations still are.
 */
export function canStillChange(executionStatus: ExecutionStatus, operations: readonly OperationForChange[]): boolean {
  if (!isTerminalExecution(executionStatus)) return true;
  return operations.some((op) => !isFinalOperation(op.status, op.verificationMethod));
}

/**
 * Whether the stored criterion results are what evaluating the criteria now would give (same verdict, same
 * rationale — the rule by which an evaluation is recorded). False means an `outcome.evaluated` is still owed: the
 * evaluation follows an operation's change in a later step (the dispatcher's advance), so an execution whose
 * operations can no longer move can still change its outcome until then.
 */
export function isOutcomeCurrent(
  criteria: readonly Criterion[],
  stored: readonly { key: string; verdict: CriterionVerdict; rationale?: string }[] | null,
  operationFor: (operationKey: string) => OperationForCriterion | undefined,
): boolean {
  if (criteria.length === 0) return true;
  if (!stored || stored.length !== criteria.length) return false;
  return criteria.every((criterion, i) => {
    const now = evaluateCriterion(criterion, operationFor(criterion.operation));
    return (
      stored[i].key === criterion.key && stored[i].verdict === now.verdict && stored[i].rationale === now.rationale
    );
  });
}

/** A person's resolution as stored on the operation's obligation. */
interface StoredResolution {
  status?: unknown;
  at?: unknown;
}

/**
 * The latest moment a re-check's read may still land on an operation a person resolved FAILED: a re-check reads the
 * hold (still MANUAL_REVIEW, so before the FAILED), then the source, which answers within CONNECTOR_TIMEOUT_MS — so no
 * later than `readWindowMs` (that, plus the grace a job's own steps are given) after the resolution. Null when no
 * operation is FAILED by a person, or every such window has passed. `now` must be on the clock the resolution's `at`
 * is stamped by, the database's: a host clock ahead would close the window early, one behind keep it open.
 */
export function lateReadUntil(
  operations: readonly { status: string; obligation?: object | null }[],
  readWindowMs: number,
  now: Date,
): Date | null {
  let until: number | null = null;
  for (const op of operations) {
    const resolution = (op.obligation as { resolution?: StoredResolution | null } | null | undefined)?.resolution;
    if (
      op.status !== OperationStatus.FAILED ||
      resolution?.status !== OperationStatus.FAILED ||
      typeof resolution.at !== 'string'
    )
      continue;
    const at = Date.parse(resolution.at);
    if (!Number.isFinite(at) || at + readWindowMs <= now.getTime()) continue;
    until = Math.max(until ?? 0, at + readWindowMs);
  }
  return until === null ? null : new Date(until);
}
