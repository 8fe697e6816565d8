import {
  type EventEntity,
  type ExecutionEntity,
  type OperationEntity,
  type RetryChain,
  contradictionsOnRecord,
  recordedResolution,
} from '@verity/persistence';
import { traceIdOf } from '@verity/platform';
import {
  LastStatusChange,
  OperationStatus,
  cancelledAsRefutedRetry,
  commitOf,
  denialLimitReached,
  everSent,
  operationFailure,
  operationRetryRule,
  type RetryRule,
  outcomeResult,
  ResolutionOption,
  offeredResolutions,
  shownApprovalState,
  summarizeEffects,
  unevaluatedCriteria,
} from '@verity/status-model';
import type { z } from 'zod';
import { pastDeadlineAt } from './approval-clock';
import type { API_SCHEMAS } from '../schemas';

/** The last status-change event of each operation, by operation id (`findLastStatusChanges`). */
export type StatusChanges = ReadonlyMap<string, LastStatusChange>;

/** What a reviewer may do with each held operation, by operation id (`ResolutionOptionsService.judge`). */
export type ResolutionOptionsOf = ReadonlyMap<string, { options: readonly ResolutionOption[] }>;

/** A nullable timestamp column, as the wire writes it. */
export const iso = (d: Date | null | undefined) => (d ? new Date(d).toISOString() : null);
/** A timestamp column that is never null. */
const isoAt = (d: Date) => new Date(d).toISOString();

/** The operation as the agent asked for it, in the wire's names: what a retry submits again. */
export function requestedOperation(op: OperationEntity) {
  return {
    key: op.key,
    connector: op.connector,
    action: op.action,
    params: op.params,
    irreversible: op.irreversible,
    requires_approval: op.requiresApproval,
    verification_method: op.verificationMethod,
    expected_state: op.expectedState,
  };
}

/**
 * The retry rule the operation shows: its status', unless what was recorded since contradicts its final status, or it
 * is a retry made on the word of a FAILED contradicted since — cancelled for it (`lastChange`: its last move), or with
 * such a FAILED up its chain of retries (`refutedUpTheChain`: persistence `retriesRefuted`) — which a retry of it would meet too.
 */
export function shownRetryRule(
  op: OperationEntity,
  lastChange: LastStatusChange | null = null,
  refutedUpTheChain = false,
  /** Its chain of retries (persistence `retryChainsOf`): at the denial limit, or longer than counted, no retry. */
  chain: Pick<RetryChain, 'denials' | 'uncounted'> | undefined = undefined,
): RetryRule {
  return operationRetryRule({
    status: op.status,
    ...contradictionsOnRecord(op),
    retryRefuted: refutedUpTheChain || cancelledAsRefutedRetry(op.status, lastChange),
    denialLimitReached: denialLimitReached(chain?.denials ?? 0, chain?.uncounted),
  });
}

/** The earlier attempts of an operation's request, as the wire writes them (nearest first). */
function presentEarlierAttempts(chain: RetryChain | undefined): OperationView['earlier_attempts'] {
  return (chain?.earlier ?? []).map((attempt) => ({
    operation_id: attempt.operationId,
    execution_id: attempt.executionId,
    status: attempt.status,
    terminal_reason: attempt.terminalReason,
    denied_by: attempt.denial?.by ?? null,
    denied_at: attempt.denial?.at ? new Date(attempt.denial.at).toISOString() : null,
    reason: attempt.denial?.reason ?? null,
  }));
}

/**
 * The hold's obligation, with the actions permitted as the row stands now (`options`: the operation's
 * `resolutionOptions`, judged by ResolutionOptionsService): a late 2xx or a re-check's read that showed the effect may
 * have been recorded after the hold was written (each takes FAILED off; a late rejection takes VERIFIED off), a FAILED may still wait for a call to land, a release for its
 * execution or dependencies — what is listed is what `resolve` accepts at that moment. An operation that was not judged
 * (nothing is permitted: resolved, a release waiting for the dispatcher included) lists none.
 */
function presentObligation(
  op: OperationEntity,
  options: readonly ResolutionOption[],
): OperationView['recovery_obligation'] {
  if (!op.obligation) return null;
  // A closed obligation (the operation left the hold, or its decision is recorded) lists none: whatever was permitted
  // when the hold was written (the stored list) is no action anyone can take now.
  const permitted =
    op.status === OperationStatus.MANUAL_REVIEW && !recordedResolution(op) ? offeredResolutions(options) : [];
  // A copy: the stored interface becomes the open object the schema describes (its extra members stay on the wire).
  return { ...op.obligation, permitted_actions: permitted };
}

/**
 * The wire format (snake_case). Internal columns (attempt fencing aside, check counters...) stay inside. `commit` and
 * `failure` are derived by libs/status-model; `lastChange` is the event that made the operation's last move (null only
 * for an operation that has not moved yet).
 */
export function presentOperation(
  op: OperationEntity,
  lastChange: LastStatusChange | null,
  options: readonly ResolutionOption[] = [],
  /**
   * Its execution's deadline has passed by the database's clock (the one `deadline_at` is on and an approve is refused
   * by), judged where an approval request waits: past it, the request is shown withdrawn.
   */
  approvalPastDeadline = false,
  /** A FAILED up its chain of retries was contradicted since (`retriesRefuted`). */
  refutedUpTheChain = false,
  /** Its chain of retries (`retryChainsOf`): absent for an operation that is no retry and was not denied. */
  chain: RetryChain | undefined = undefined,
): OperationView {
  const contradictions = contradictionsOnRecord(op);
  const refuted = contradictions.failureRefuted;
  return {
    id: op.id,
    execution_id: op.executionId,
    ...requestedOperation(op),
    depends_on: op.dependsOn,
    status: op.status,
    terminal_reason: op.terminalReason,
    commit: commitOf({
      status: op.status,
      everSent: everSent(op),
      terminalReason: op.terminalReason,
      ...contradictions,
    }),
    failure: operationFailure(
      { status: op.status, terminalReason: op.terminalReason, failureRefuted: refuted },
      lastChange,
    ),
    retry: shownRetryRule(op, lastChange, refutedUpTheChain, chain),
    attempt: op.attempt,
    no_change_required: op.noChangeRequired,
    evidence: op.evidence,
    observation: op.observation,
    // The baseline is internal; an approval record without a state (only the baseline so far) is not yet on the wire.
    approval: op.approval?.state
      ? {
          ...op.approval,
          state: shownApprovalState(op.status, op.approval.state, approvalPastDeadline),
          baseline: undefined,
        }
      : null,
    recovery_obligation: presentObligation(op, options),
    retry_of: op.retryOf,
    earlier_attempts: presentEarlierAttempts(chain),
    sent_at: iso(op.sentAt),
    acknowledged_at: iso(op.acknowledgedAt),
    rejected_at: iso(op.rejectedAt),
    rejection: op.rejection ? { ...op.rejection } : null,
    created_at: isoAt(op.createdAt),
    updated_at: isoAt(op.updatedAt),
  };
}

export function presentExecution(
  execution: ExecutionEntity,
  operations: OperationEntity[],
  changes: StatusChanges,
  options: ResolutionOptionsOf = new Map(),
  /** The database's clock now, where one of the operations' approval requests waits (databaseNowForApprovals). */
  databaseNow?: Date,
  /** Its retries whose chain holds a FAILED contradicted since (`retriesRefuted`). */
  refuted: ReadonlySet<string> = new Set(),
  /** The chains of retries of its operations that are retries or were denied (`retryChainsOf`). */
  chains: ReadonlyMap<string, RetryChain> = new Map(),
): ExecutionView {
  const pastDeadline = pastDeadlineAt(execution.deadlineAt, databaseNow);
  const hasCriteria = execution.criteria.length > 0;
  // Until its first evaluation is written an execution with criteria shows them pending, never an outcome of null
  // (what an execution without criteria shows): the 201 and a read before the dispatcher's first advance included.
  const criteriaResults =
    execution.criteriaResults?.map((result) => ({ ...result })) ??
    (hasCriteria ? unevaluatedCriteria(execution.criteria) : null);
  // Judged as of the submission: evaluated_at stays a time, as every outcome's is (the verdicts say not evaluated yet).
  const outcome =
    execution.outcome ??
    (criteriaResults
      ? { result: outcomeResult(criteriaResults.map((r) => r.verdict)), evaluated_at: isoAt(execution.createdAt) }
      : null);
  return {
    id: execution.id,
    agent_id: execution.agentId,
    intent: execution.intent,
    status: execution.status,
    effects: summarizeEffects(
      operations.map((op) => ({
        ...op,
        ...contradictionsOnRecord(op),
      })),
    ),
    failure: execution.failure,
    criteria: execution.criteria,
    criteria_results: criteriaResults,
    outcome,
    deadline_at: isoAt(execution.deadlineAt),
    created_at: isoAt(execution.createdAt),
    updated_at: isoAt(execution.updatedAt),
    trace_id: traceIdOf(execution.traceParent),
    operations: operations.map((op) =>
      presentOperation(
        op,
        changes.get(op.id) ?? null,
        options.get(op.id)?.options,
        pastDeadline,
        refuted.has(op.id),
        chains.get(op.id),
      ),
    ),
  };
}

export function presentEvent(event: EventEntity): EventView {
  return {
    id: event.id,
    execution_id: event.executionId,
    operation_id: event.operationId,
    seq: Number(event.seq),
    type: event.type,
    from_status: event.fromStatus,
    to_status: event.toStatus,
    data: event.data,
    created_at: isoAt(event.createdAt),
  };
}

/** What the presenters return is what the response schemas say (the OpenAPI document's components). */
export type ExecutionView = z.output<typeof API_SCHEMAS.Execution>;
export type OperationView = z.output<typeof API_SCHEMAS.Operation>;
export type EventView = z.output<typeof API_SCHEMAS.Event>;
