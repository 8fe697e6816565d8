import { canStillChange, isSettledOperation, isTerminalExecution } from '@verity/status-model';
import type { Execution, Operation } from './types';

/**
 * Settled means no automatic step will move the operation again: a terminal status, MANUAL_REVIEW (held for a
 * human), or ACKNOWLEDGED without read-back (`verification_method` `""`: its honest end). From the status model.
 */
export function isOperationSettled(operation: Pick<Operation, 'status' | 'verification_method'>): boolean {
  return isSettledOperation(operation.status, operation.verification_method);
}

/**
 * What `waitForSettled` waits for: the execution is terminal (completed, failed, cancelled, expired) and every
 * operation has settled — MANUAL_REVIEW included, since only a person can move it. A settled execution can still hold
 * effects nobody can vouch for: read `effects`. Not the condition on which the API ends a stream: see
 * `canExecutionStillChange`.
 */
export function isExecutionSettled(execution: Pick<Execution, 'status' | 'operations'>): boolean {
  return isTerminalExecution(execution.status) && execution.operations.every(isOperationSettled);
}

/**
 * Whether anything can still change: the execution is not terminal (pending approvals included), or an operation is
 * held for a human (MANUAL_REVIEW) or still in flight or reconciling. The API keeps a stream open while this holds
 * (until the execution's deadline) and ends it with reason `settled` once it does not. From the status model.
 */
export function canExecutionStillChange(execution: Pick<Execution, 'status' | 'operations'>): boolean {
  return canStillChange(
    execution.status,
    execution.operations.map((op) => ({ status: op.status, verificationMethod: op.verification_method })),
  );
}
