/**
 * Wire types of the Verity REST API (`/v1`, snake_case), mirroring exactly what the API returns: see
 * apps/api/src/executions/presenter.ts (views), apps/api/src/openapi.ts (schemas), apps/api/src/executions/submission.ts
 * (the request schema) and the controllers. Status enums come from the status model, never from copies.
 */
import type {
  Commit,
  CriterionVerdict,
  Effects,
  EffectsSummary,
  ExecutionFailure,
  ExecutionStatus,
  FailureCategory,
  OperationFailure,
  OperationStatus,
  Outcome,
  OutcomeResult,
  ResolutionStatus,
  RetryRule,
  TerminalReason,
  VerificationMethodValue,
  statusModelDocument,
} from '@verity/status-model';

export type {
  Commit,
  CriterionVerdict,
  Effects,
  EffectsSummary,
  ExecutionFailure,
  FailureCategory,
  OperationFailure,
  Outcome,
  OutcomeResult,
  ResolutionStatus,
  VerificationMethodValue,
};

/** Any JSON object. */
export type JsonObject = Record<string, unknown>;

/** An ISO 8601 timestamp, as the API writes it (`Date.prototype.toISOString`). */
export type IsoDateTime = string;

/** A string enum's values as literals too, so requests accept `'VERIFIED'` as well as `OperationStatus.VERIFIED`. */
export type EnumInput<E extends string> = E | `${E}`;

// ---------------------------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------------------------

/** One operation of a submission (`OperationRequestSchema`). Unknown fields are rejected by the API (400). */
export interface OperationRequest {
  /** Unique within the execution: 1–64 of letters, digits, `_`, `.`, `-`. */
  key: string;
  connector: string;
  action: string;
  params: JsonObject;
  /** Defaults to the connector's declaration (not reversible → irreversible). */
  irreversible?: boolean;
  requires_approval?: boolean;
  /** Defaults to `read_after_write` when the connector can read back, else `""`. */
  verification_method?: EnumInput<Exclude<VerificationMethodValue, ''>> | '';
  /** What the agent believes the target holds; a mismatch is a KNOWLEDGE_CONFLICT (at most 50 keys). */
  expected_state?: JsonObject | null;
  depends_on?: string[];
}

/**
 * A success criterion (`CriterionSchema`), judged whenever its operation changes: exactly one of `expect_status` or
 * `expect_evidence` (a JSON path into the operation's verified evidence, e.g. `record.amount`, and the value it must hold).
 */
export type CriterionRequest =
  | {
      key: string;
      /** The key of an operation of the same submission. */
      operation: string;
      expect_status: EnumInput<OperationStatus>;
    }
  | { key: string; operation: string; expect_evidence: { path: string; equals: unknown } };

/** The body of POST /v1/executions (`SubmissionSchema`). */
export interface SubmissionRequest {
  agent_id: string;
  intent: string;
  /** 1 s to 7 days; 600 by default. */
  deadline_seconds?: number;
  /** 1 to 100 operations. */
  operations: OperationRequest[];
  criteria?: CriterionRequest[];
}

/** Query of GET /v1/executions. */
export interface ListExecutionsQuery {
  status?: EnumInput<ExecutionStatus>;
  /** `next_cursor` of the previous page. */
  cursor?: string;
  /** 1–200, 50 by default. */
  limit?: number;
}

/** Query of GET /v1/executions/{id}/events. */
export interface ListEventsQuery {
  /** An event id (or a `seq` number): events strictly after it. */
  after?: string;
  /** 1–1000, 500 by default. */
  limit?: number;
}

/** Body of POST /v1/operations/{id}/approval. */
export interface ApprovalRequest {
  decision: 'approve' | 'deny';
  reason?: string;
}

/** Body of POST /v1/operations/{id}/resolve (a MANUAL_REVIEW resolution by a reviewer). */
export interface ResolveRequest {
  /**
   * A resolution of the hold, or `MANUAL_REVIEW`: "still unknown after investigation" — the operation stays held, its
   * obligation is re-dated (`due_in_seconds`, else the tenant's due time) and the statement is kept in its history.
   */
  status: EnumInput<ResolutionStatus> | 'MANUAL_REVIEW';
  /** Required, non-blank, up to 10 000 characters. */
  evidence: string;
  /** Only with `MANUAL_REVIEW`: when the re-dated obligation is due. */
  due_in_seconds?: number;
}

// ---------------------------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------------------------

export type ApprovalState = 'requested' | 'granted' | 'denied';

/** `operations[].approval` (the internal baseline is never on the wire). */
export interface ApprovalView {
  state: ApprovalState;
  requested_at?: IsoDateTime;
  decided_at?: IsoDateTime;
  decided_by?: string;
  reason?: string;
  expires_at?: IsoDateTime;
  [extra: string]: unknown;
}

/** A human resolution recorded on an operation (in `evidence.resolution` and `recovery_obligation.resolution`). */
export interface ResolutionRecord {
  status: ResolutionStatus;
  evidence: string;
  by: string;
  at: IsoDateTime;
  /** A FAILED resolution re-reads the source first: what that read found (absent, or it could not say). */
  read_back?: {
    kind: 'absent' | 'stale' | 'field_missing' | 'unreachable';
    source: string;
    read_at: IsoDateTime;
    [extra: string]: unknown;
  };
}

/** The recovery obligation that a MANUAL_REVIEW operation carries: who owns it, what evidence closes it. */
export interface RecoveryObligationView {
  reason: string;
  owner: string;
  evidence_required: string;
  permitted_actions: string[];
  due_at: IsoDateTime;
  escalation_target: string;
  escalated_at: IsoDateTime | null;
  resolution?: ResolutionRecord;
  [extra: string]: unknown;
}

export type Observation = 'converged' | 'superseded' | 'degraded' | 'unavailable';

/** One operation as the API presents it (`presentOperation`). */
export interface Operation {
  id: string;
  execution_id: string;
  key: string;
  connector: string;
  action: string;
  params: JsonObject;
  irreversible: boolean;
  requires_approval: boolean;
  verification_method: VerificationMethodValue;
  expected_state: JsonObject | null;
  depends_on: string[];
  /** Whether an effect occurred in the world. */
  status: OperationStatus;
  terminal_reason: TerminalReason | null;
  /** Reference 002: did this operation's own request commit an effect (`not_dispatched` says only: never sent). */
  commit: Commit;
  /** Set on FAILED, CANCELLED and MANUAL_REVIEW: what went differently, who can act, whether a retry could help. */
  failure: OperationFailure | null;
  /** The retry rule of the current status: `safe` only for FAILED and CANCELLED. */
  retry: RetryRule;
  attempt: number;
  no_change_required: boolean;
  /** Read-after-write evidence, or a human resolution. */
  evidence: JsonObject | null;
  observation: Observation | null;
  approval: ApprovalView | null;
  recovery_obligation: RecoveryObligationView | null;
  retry_of: string | null;
  sent_at: IsoDateTime | null;
  acknowledged_at: IsoDateTime | null;
  created_at: IsoDateTime;
  updated_at: IsoDateTime;
}

/** GET /v1/operations/{id}: the operation plus the resolutions a reviewer may choose now. */
export interface OperationDetail extends Operation {
  permitted_resolutions: ResolutionStatus[];
  /** Every resolution, permitted or not, with why; `check: "read_back"`: the source is read first (FAILED). */
  resolution_options: ResolutionOption[];
}

export interface ResolutionOption {
  status: ResolutionStatus;
  permitted: boolean;
  why: string;
  check: 'read_back' | null;
}

export type Criterion =
  | { key: string; operation: string; expect_status: OperationStatus }
  | { key: string; operation: string; expect_evidence: { path: string; equals: unknown } };

/** A criterion as last judged (`outcome.evaluated`): the verdict, why, and the events behind it. */
export type CriterionResult = Criterion & {
  verdict: CriterionVerdict;
  /** Absent only on results written before rationales existed. */
  rationale?: string;
  evidence_event_ids: string[];
};

/** One execution with its operations (`presentExecution`). */
export interface Execution {
  id: string;
  agent_id: string;
  intent: string;
  /** Where the agent's own work stands (`completed` does not mean that effects happened). */
  status: ExecutionStatus;
  /** Counts per operation status and a summary, separate from the execution status. */
  effects: Effects;
  failure: ExecutionFailure | null;
  criteria: Criterion[];
  criteria_results: CriterionResult[] | null;
  /** The overall result of the criteria, kept current as operations change; null without criteria. */
  outcome: Outcome | null;
  deadline_at: IsoDateTime;
  created_at: IsoDateTime;
  updated_at: IsoDateTime;
  operations: Operation[];
}

/** GET /v1/executions: newest first. */
export interface ExecutionList {
  data: Execution[];
  next_cursor: string | null;
}

/** Event types the system writes today; the set is open (new types may appear), so `type` is any string. */
export type KnownEventType =
  | 'execution.created'
  | 'execution.status_changed'
  | 'operation.status_changed'
  | 'operation.release_requested'
  | 'operation.resolved'
  | 'approval.requested'
  | 'approval.decided'
  | 'approval.stale_authority'
  | 'approval.stale_baseline'
  | 'context.unavailable'
  | 'context.read'
  | 'knowledge.conflict'
  | 'obligation.escalated'
  | 'outcome.evaluated';

/** One entry of the append-only event log (`presentEvent`), also the `data` of each SSE frame. */
export interface ExecutionEvent {
  id: string;
  execution_id: string;
  operation_id: string | null;
  /** 1, 2, 3 … per execution, no gaps, in commit order. */
  seq: number;
  type: KnownEventType | (string & NonNullable<unknown>);
  /** An ExecutionStatus for execution events, an OperationStatus for operation events, else null. */
  from_status: ExecutionStatus | OperationStatus | null;
  to_status: ExecutionStatus | OperationStatus | null;
  data: JsonObject;
  created_at: IsoDateTime;
}

/** `operation.status_changed`: an operation moved (narrow with `isOperationStatusEvent`). */
export interface OperationStatusEvent extends ExecutionEvent {
  type: 'operation.status_changed';
  operation_id: string;
  from_status: OperationStatus;
  to_status: OperationStatus;
}

/** `execution.created` / `execution.status_changed` (narrow with `isExecutionStatusEvent`). */
export interface ExecutionStatusEvent extends ExecutionEvent {
  type: 'execution.created' | 'execution.status_changed';
  operation_id: null;
  from_status: ExecutionStatus | null;
  to_status: ExecutionStatus;
}

export function isOperationStatusEvent(event: ExecutionEvent): event is OperationStatusEvent {
  return event.type === 'operation.status_changed';
}

export function isExecutionStatusEvent(event: ExecutionEvent): event is ExecutionStatusEvent {
  return event.type === 'execution.created' || event.type === 'execution.status_changed';
}

/** GET /v1/executions/{id}/events. */
export interface EventList {
  data: ExecutionEvent[];
  next_cursor: string | null;
}

/**
 * Why the server ended a stream (`event: end`): `settled` — nothing can change any more; `deadline` — the execution's
 * deadline passed while something (an operation held for review, one still reconciling) could still change;
 * `key_revoked` — the API key was revoked while streaming.
 */
export type StreamEndReason = 'settled' | 'deadline' | 'key_revoked';

/** POST /v1/operations/{id}/retry: the new operation (`retry_of` set) and the new execution that runs it. */
export interface RetryResult {
  operation: Operation;
  execution: Execution;
}

export type CapabilityName = 'read_back' | 'context_read' | 'provider_idempotency' | 'reversible';

/** One action of a connector: an action may differ from its connector's declaration. */
export interface ConnectorAction {
  name: string;
  description: string;
  read_back: boolean;
  context_read: boolean;
  provider_idempotency: boolean;
  reversible: boolean;
  can_reach_verified: boolean;
  /** A capability that holds only for some operations of the action, and when (in words). */
  conditions: Partial<Record<CapabilityName, string>>;
  /** JSON Schema of the action's params. */
  params_schema: JsonObject;
}

/** One entry of GET /v1/connectors: the declarations users read as the connector's limitations. */
export interface ConnectorInfo {
  name: string;
  description: string;
  read_back: boolean;
  context_read: boolean;
  provider_idempotency: boolean;
  reversible: boolean;
  can_reach_verified: boolean;
  actions: ConnectorAction[];
}

/** GET /v1/connectors. */
export interface ConnectorList {
  data: ConnectorInfo[];
}

/** GET /v1/status-model: generated from libs/status-model, so its type is the generator's. */
export type StatusModelDocument = ReturnType<typeof statusModelDocument>;

/** One field error of a 400 validation problem. */
export interface FieldError {
  /** A path such as `operations[0].params.amount`, `Idempotency-Key` or `(body)`. */
  field: string;
  /** The rule that failed, e.g. `too_small`, `known_connector`, `unique`. */
  rule: string;
  message: string;
}

/** An RFC 9457 problem (application/problem+json), with this API's extension members. */
export interface ProblemDetails {
  /** `https://verity.dev/problems/<code>`. */
  type: string;
  title: string;
  status: number;
  detail?: string;
  instance?: string;
  errors?: FieldError[];
  [extra: string]: unknown;
}
