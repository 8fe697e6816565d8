import type { EventEntity, ExecutionEntity, OperationEntity } from '@verity/persistence';
import { traceIdOf } from '@verity/platform';
import {
  LastStatusChange,
  commitOf,
  everSent,
  operationFailure,
  retryRuleOf,
  summarizeEffects,
} from '@verity/status-model';

/** The last status-change event of each operation, by operation id (`findLastStatusChanges`). */
export type StatusChanges = ReadonlyMap<string, LastStatusChange>;

const iso = (d: Date | null | undefined) => (d ? new Date(d).toISOString() : null);

/**
 * The wire format (snake_case). Internal columns (attempt fencing aside, check counters...) stay inside. `commit` and
 * `failure` are derived by libs/status-model; `lastChange` is the event that made the operation's last move (null only
 * for an operation that has not moved yet).
 */
export function presentOperation(op: OperationEntity, lastChange: LastStatusChange | null) {
  return {
    id: op.id,
    execution_id: op.executionId,
    key: op.key,
    connector: op.connector,
    action: op.action,
    params: op.params,
    irreversible: op.irreversible,
    requires_approval: op.requiresApproval,
    verification_method: op.verificationMethod,
    expected_state: op.expectedState,
    depends_on: op.dependsOn,
    status: op.status,
    terminal_reason: op.terminalReason,
    commit: commitOf({ status: op.status, everSent: everSent(op), terminalReason: op.terminalReason }),
    failure: operationFailure(op, lastChange),
    retry: retryRuleOf(op.status),
    attempt: op.attempt,
    no_change_required: op.noChangeRequired,
    evidence: op.evidence,
    observation: op.observation,
    // The baseline is internal; an approval record without a state (only the baseline so far) is not yet on the wire.
    approval: op.approval?.state ? { ...op.approval, baseline: undefined } : null,
    recovery_obligation: op.obligation,
    retry_of: op.retryOf,
    sent_at: iso(op.sentAt),
    acknowledged_at: iso(op.acknowledgedAt),
    created_at: iso(op.createdAt),
    updated_at: iso(op.updatedAt),
  };
}

export function presentExecution(execution: ExecutionEntity, operations: OperationEntity[], changes: StatusChanges) {
  return {
    id: execution.id,
    agent_id: execution.agentId,
    intent: execution.intent,
    status: execution.status,
    effects: summarizeEffects(operations),
    failure: execution.failure,
    criteria: execution.criteria,
    criteria_results: execution.criteriaResults,
    outcome: execution.outcome,
    deadline_at: iso(execution.deadlineAt),
    created_at: iso(execution.createdAt),
    updated_at: iso(execution.updatedAt),
    trace_id: traceIdOf(execution.traceParent),
    operations: operations.map((op) => presentOperation(op, changes.get(op.id) ?? null)),
  };
}

export function presentEvent(event: EventEntity) {
  return {
    id: event.id,
    execution_id: event.executionId,
    operation_id: event.operationId,
    seq: Number(event.seq),
    type: event.type,
    from_status: event.fromStatus,
    to_status: event.toStatus,
    data: event.data,
    created_at: iso(event.createdAt),
  };
}

export type ExecutionView = ReturnType<typeof presentExecution>;
export type OperationView = ReturnType<typeof presentOperation>;
export type EventView = ReturnType<typeof presentEvent>;
