import { isSettledOperation, isTerminalExecution } from '@verity/status-model';
import type { Execution, Operation } from './types';

/**
 * Settled means no automatic step will move the operation again: a terminal status, MANUAL_REVIEW (held for a
 * human), or ACKNOWLEDGED without read-back (`verification_method` `""`: its honest end). From the status model.
 */
export function isOperationSettled(operation: Pick<Operation, 'status' | 'verification_method'>): boolean {
  return isSettledOperation(operation.status, operation.verification_method);
}

/**
 * The condition on which the API ends a stream: the execution is terminal (completed, failed, cancelled, expired)
 * and every operation has settled. A settled execution can still hold effects nobody can vouch for: read `effects`.
 */
export function isExecutionSettled(execution: Pick<Execution, 'status' | 'operations'>): boolean {
  return isTerminalExecution(execution.status) && execution.operations.every(isOperationSettled);
}
