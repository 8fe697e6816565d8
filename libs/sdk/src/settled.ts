import {
  canStillChange,
  evaluateCriterion,
  isSettledOperation,
  isTerminalExecution,
  latestByKey,
} from '@verity/status-model';
import type { Execution, Operation } from './types';

/**
 * Settled means no automatic step will move the operation again: a terminal status, MANUAL_REVIEW (held for a
 * human), or ACKNOWLEDGED without read-back (`verification_method` `""`: its honest end). From the status model.
 */
export function isOperationSettled(operation: Pick<Operation, 'status' | 'verification_method'>): boolean {
  return isSettledOperation(operation.status, operation.verification_method);
}

type ExecutionView = Pick<Execution, 'status' | 'operations'> &
  Partial<Pick<Execution, 'criteria' | 'criteria_results'>>;

/**
 * What `waitForSettled` waits for: the execution is terminal (completed, failed, cancelled, expired), every
 * operation has settled — MANUAL_REVIEW included, since only a person can move it — and no evaluation of its criteria
 * is still owed (`isOutcomeOwed`). A settled execution can still hold effects nobody can vouch for: read `effects`.
 * Not the condition on which the API ends a stream: see `canExecutionStillChange`.
 */
export function isExecutionSettled(execution: ExecutionView): boolean {
  return (
    isTerminalExecution(execution.status) && execution.operations.every(isOperationSettled) && !isOutcomeOwed(execution)
  );
}

/**
 * Whether anything can still change: the execution is not terminal (pending approvals included), or an operation is
 * held for a human (MANUAL_REVIEW) or still in flight or reconciling, or an evaluation of the criteria is still owed
 * after the last change. The API keeps a stream open while this holds (until the execution's deadline) and ends it
 * with reason `settled` once it does not — and, after a reviewer's FAILED, for a few seconds more (the server's
 * CONNECTOR_TIMEOUT_MS + SEND_GRACE_MS, which a client does not know), while a re-check's read begun before it may still
 * land on it. From the status model.
 */
export function canExecutionStillChange(execution: ExecutionView): boolean {
  return (
    canStillChange(
      execution.status,
      execution.operations.map((op) => ({ status: op.status, verificationMethod: op.verification_method })),
    ) || isOutcomeOwed(execution)
  );
}

/**
 * True when a criterion's stored verdict is not what the operations as read give now: an operation moved (the
 * reconciler found a cancelled execution's charge, a reviewer resolved a hold) and the evaluation that follows in the
 * dispatcher's next step has not been written yet — `outcome` is about to change. Judged by the status model's rules
 * (the API's stream waits for the same evaluation); a change of rationale alone leaves the verdicts and the result as
 * they are.
 */
export function isOutcomeOwed(
  execution: Partial<Pick<Execution, 'criteria' | 'criteria_results' | 'operations'>>,
): boolean {
  const criteria = execution.criteria ?? [];
  if (criteria.length === 0) return false;
  const stored = execution.criteria_results;
  if (!stored || stored.length !== criteria.length) return true;
  const latest = latestByKey(execution.operations ?? []);
  return criteria.some((criterion, i) => {
    const op = latest.get(criterion.operation);
    const now = evaluateCriterion(
      criterion,
      op && {
        status: op.status,
        verificationMethod: op.verification_method,
        evidence: (op.evidence as Record<string, unknown> | null | undefined) ?? null,
        // The one cause the criteria read: a cancel because a dependency did not happen (its failure code says so).
        lastChange:
          op.failure?.code === 'dependency_not_done'
            ? { from: null, cause: 'dependency_not_done', at: new Date(0) }
            : null,
        // On the wire, a final status contradicted since is one whose commit is `unknown` (VERIFIED is otherwise
        // committed or never dispatched, FAILED rejected).
        contradicted: (op.status === 'VERIFIED' || op.status === 'FAILED') && op.commit === 'unknown',
      },
    );
    return stored[i].key !== criterion.key || stored[i].verdict !== now.verdict;
  });
}
