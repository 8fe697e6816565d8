/**
 * What can still change: the question a live stream (and anyone waiting on an execution) asks. Wider than "settled"
 * (isSettledOperation), which counts a hold for a human as the end of the automatic life: here a MANUAL_REVIEW is
 * still open, because a reviewer's resolution will move it.
 */
import { ExecutionStatus, isTerminalExecution } from './execution';
import { OperationStatus, VerificationMethodValue, isSettledOperation } from './operation';

export interface OperationForChange {
  status: OperationStatus;
  verificationMethod: VerificationMethodValue;
}

/**
 * Nothing, automatic or human, will move the operation again: a terminal status, or ACKNOWLEDGED with no way to read
 * it back (its honest end). A VERIFIED effect may still be observed later, but observation never changes a status.
 */
export function isFinalOperation(status: OperationStatus, verificationMethod: VerificationMethodValue): boolean {
  return status !== OperationStatus.MANUAL_REVIEW && isSettledOperation(status, verificationMethod);
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
