/**
 * Wire types of the Verity REST API (`/v1`, snake_case), derived from the types generated from the API's own OpenAPI
 * document (./generated/wire.ts, written by `npm run generate:wire` from the API's zod schemas; a test fails when it is
 * out of date). Nothing here restates a field: each type is a generated one, at most narrowed where the document says
 * less than the API guarantees — a status field typed as the status model's enum (so `op.status` can be passed to
 * `isSettledOperation`), a criterion as the union of its two forms. A narrowing must fit the generated field
 * (`Narrow` checks it), so a field the API drops or retypes is a compile error here, not a surprise for a user.
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
} from '@verity/status-model';
import type { components, operations } from './generated/wire';

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

/** The component schemas of the API's OpenAPI document, as generated. */
export type WireSchemas = components['schemas'];
export type { components as WireComponents, operations as WireOperations, paths as WirePaths } from './generated/wire';

/**
 * `T` with the fields of `N` replaced by narrower types: each must be assignable to the generated field it replaces
 * (index signatures of open objects are kept).
 */
export type Narrow<T, N extends { [K in keyof N]: K extends keyof T ? T[K] : never }> = {
  [K in keyof T as K extends keyof N ? never : K]: T[K];
} & N;

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
export type OperationRequest = WireSchemas['Submission']['operations'][number];

type GeneratedCriterion = WireSchemas['Criterion'];

/**
 * A success criterion (`CriterionSchema`), judged whenever its operation changes: exactly one of `expect_status` or
 * `expect_evidence` (a JSON path into the operation's verified evidence, e.g. `record.amount`, and the value it must
 * hold). The document has both optional (the "exactly one" is a rule of the schema); this union says it.
 */
export type CriterionRequest = Fits<
  GeneratedCriterion,
  | { key: string; operation: string; expect_status: EnumInput<OperationStatus> }
  | { key: string; operation: string; expect_evidence: { path: string; equals: unknown } }
>;

/** The body of POST /v1/executions (`SubmissionSchema`). */
export type SubmissionRequest = Narrow<WireSchemas['Submission'], { criteria?: CriterionRequest[] }>;

/** Query of GET /v1/executions. */
export type ListExecutionsQuery = NonNullable<operations['listExecutions']['parameters']['query']>;

/** Query of GET /v1/executions/{id}/events. */
export type ListEventsQuery = NonNullable<operations['listExecutionEvents']['parameters']['query']>;

/** Body of POST /v1/operations/{id}/approval. */
export type ApprovalRequest = WireSchemas['ApprovalRequest'];

/**
 * Body of POST /v1/operations/{id}/resolve: a resolution of the hold, or `MANUAL_REVIEW` — "still unknown after
 * investigation": the operation stays held, its obligation is re-dated (`due_in_seconds`, else the tenant's due time).
 */
export type ResolveRequest = WireSchemas['ResolveRequest'];

// ---------------------------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------------------------

type GeneratedOperation = WireSchemas['Operation'];

/** `operations[].approval` (the internal baseline is never on the wire). */
export type ApprovalView = NonNullable<GeneratedOperation['approval']>;
export type ApprovalState = ApprovalView['state'];

/** The recovery obligation that a MANUAL_REVIEW operation carries: who owns it, what evidence closes it. */
export type RecoveryObligationView = Narrow<
  NonNullable<GeneratedOperation['recovery_obligation']>,
  { resolution?: ResolutionRecord }
>;

/** A human resolution recorded on an operation (in `evidence.resolution` and `recovery_obligation.resolution`). */
export type ResolutionRecord = Narrow<WireSchemas['Resolution'], { status: ResolutionStatus }>;

export type Observation = NonNullable<GeneratedOperation['observation']>;

/** The fields of an operation typed as the status model's own types. */
type OperationNarrowing = {
  verification_method: VerificationMethodValue;
  /** Whether an effect occurred in the world. */
  status: OperationStatus;
  terminal_reason: TerminalReason | null;
  /**
   * Did this operation's own request commit an effect (`not_dispatched` says only: never sent). `unknown` also for a
   * VERIFIED whose send the provider rejected late (`rejected_at`): the record does not claim it against its answer.
   */
  commit: Commit;
  /** Set on FAILED, CANCELLED and MANUAL_REVIEW: what went differently, who can act, whether a retry could help. */
  failure: OperationFailure | null;
  /**
   * Whether a retry may be made now: `safe` only for CANCELLED and for FAILED — not a FAILED the provider acknowledged
   * late or whose source showed the effect since (`forbidden`, with `commit: "unknown"`).
   */
  retry: RetryRule;
  recovery_obligation: RecoveryObligationView | null;
};

/** One operation as the API presents it (`presentOperation`). */
export type Operation = Narrow<GeneratedOperation, OperationNarrowing>;

export type ResolutionOption = Narrow<
  WireSchemas['OperationDetail']['resolution_options'][number],
  { status: ResolutionStatus }
>;

/** GET /v1/operations/{id}: the operation plus the resolutions a reviewer may choose now. */
export type OperationDetail = Narrow<
  WireSchemas['OperationDetail'],
  OperationNarrowing & {
    permitted_resolutions: ResolutionStatus[];
    /** Every resolution, permitted or not, with why; `check: "read_back"`: the source is read first (FAILED). */
    resolution_options: ResolutionOption[];
  }
>;

type GeneratedExecution = WireSchemas['Execution'];

export type Criterion = Fits<
  GeneratedCriterion,
  | { key: string; operation: string; expect_status: OperationStatus }
  | { key: string; operation: string; expect_evidence: { path: string; equals: unknown } }
>;

/** A criterion as last judged (`outcome.evaluated`): the verdict, why, and the events behind it. */
export type CriterionResult = Criterion &
  Narrow<NonNullable<GeneratedExecution['criteria_results']>[number], { verdict: CriterionVerdict }>;

/** One execution with its operations (`presentExecution`). */
export type Execution = Narrow<
  GeneratedExecution,
  {
    /** Where the agent's own work stands (`completed` does not mean that effects happened). */
    status: ExecutionStatus;
    /** Counts per operation status and a summary, separate from the execution status. */
    effects: Effects;
    failure: ExecutionFailure | null;
    criteria: Criterion[];
    criteria_results: CriterionResult[] | null;
    /** The overall result of the criteria, kept current as operations change; null without criteria. */
    outcome: Outcome | null;
    operations: Operation[];
  }
>;

/** GET /v1/executions: newest first. */
export type ExecutionList = Narrow<WireSchemas['ExecutionList'], { data: Execution[] }>;

/** Event types the system writes today; the set is open (new types may appear), so `type` is any string. */
export type KnownEventType =
  | 'execution.created'
  | 'execution.status_changed'
  | 'operation.status_changed'
  | 'operation.resolved'
  | 'operation.release_withdrawn'
  | 'operation.acknowledged_late'
  | 'operation.rejected_late'
  | 'operation.rechecked'
  | 'operation.still_unknown'
  | 'operation.observed'
  | 'spending_cap.exceeded'
  | 'approval.requested'
  | 'approval.decided'
  | 'approval.stale_authority'
  | 'approval.stale_baseline'
  | 'context.unavailable'
  | 'send.secrets_unopened'
  | 'context.read'
  | 'knowledge.conflict'
  | 'obligation.escalated'
  | 'outcome.evaluated';

/** One entry of the append-only event log (`presentEvent`), also the `data` of each SSE frame. */
export type ExecutionEvent = Narrow<
  WireSchemas['Event'],
  {
    type: KnownEventType | (string & NonNullable<unknown>);
    /** An ExecutionStatus for execution events, an OperationStatus for operation events, else null. */
    from_status: ExecutionStatus | OperationStatus | null;
    to_status: ExecutionStatus | OperationStatus | null;
  }
>;

/** `operation.status_changed`: an operation moved (narrow with `isOperationStatusEvent`). */
export type OperationStatusEvent = ExecutionEvent & {
  type: 'operation.status_changed';
  operation_id: string;
  from_status: OperationStatus;
  to_status: OperationStatus;
};

/** `execution.created` / `execution.status_changed` (narrow with `isExecutionStatusEvent`). */
export type ExecutionStatusEvent = ExecutionEvent & {
  type: 'execution.created' | 'execution.status_changed';
  operation_id: null;
  from_status: ExecutionStatus | null;
  to_status: ExecutionStatus;
};

export function isOperationStatusEvent(event: ExecutionEvent): event is OperationStatusEvent {
  return event.type === 'operation.status_changed';
}

export function isExecutionStatusEvent(event: ExecutionEvent): event is ExecutionStatusEvent {
  return event.type === 'execution.created' || event.type === 'execution.status_changed';
}

/** GET /v1/executions/{id}/events. */
export type EventList = Narrow<WireSchemas['EventList'], { data: ExecutionEvent[] }>;

/**
 * Why the server ended a stream (`event: end`): `settled` — nothing can change any more; `deadline` — the execution's
 * deadline passed while something (an operation held for review, one still reconciling) could still change;
 * `key_revoked` — the API key was revoked while streaming.
 */
export type StreamEndReason = 'settled' | 'deadline' | 'key_revoked';

/** POST /v1/operations/{id}/retry: the new operation (`retry_of` set) and the new execution that runs it. */
export type RetryResult = Narrow<WireSchemas['RetryResult'], { operation: Operation; execution: Execution }>;

export type CapabilityName = 'read_back' | 'context_read' | 'provider_idempotency' | 'reversible';

/** GET /v1/connectors. */
export type ConnectorList = WireSchemas['ConnectorList'];

/** One entry of GET /v1/connectors: the declarations users read as the connector's limitations. */
export type ConnectorInfo = ConnectorList['data'][number];

/**
 * One action of a connector (an action may differ from its connector's declaration). `conditions`: a capability that
 * holds only for some operations of the action, and when (in words), by CapabilityName.
 */
export type ConnectorAction = ConnectorInfo['actions'][number];

/** GET /v1/status-model. */
export type StatusModelDocument = WireSchemas['StatusModel'];

type GeneratedProblem = WireSchemas['Problem'];

/** One field error of a 400 validation problem: `field` is a path such as `operations[0].params.amount`. */
export type FieldError = NonNullable<GeneratedProblem['errors']>[number];

/** The `type` URL of each problem the API sends (`https://verity.dev/problems/not-found`). */
export type ProblemType = GeneratedProblem['type'];

/** The code of each problem the API sends: the last segment of its `type` URL (the list is in docs/api.md). */
export type KnownProblemCode = ProblemType extends `https://verity.dev/problems/${infer Code}` ? Code : never;

/**
 * An RFC 9457 problem (application/problem+json), with this API's extension members. `type` is any string here: an
 * answer from something in front of the API (a proxy's 502) gets a problem synthesized with `about:blank`, and a newer
 * server may send a code this SDK does not know yet.
 */
export type ProblemDetails = Fits<
  Record<string, unknown>,
  {
    /** `https://verity.dev/problems/<code>` (a ProblemType), or `about:blank`. */
    type: ProblemType | (string & NonNullable<unknown>);
    title: GeneratedProblem['title'];
    status: GeneratedProblem['status'];
    detail?: GeneratedProblem['detail'];
    instance?: GeneratedProblem['instance'];
    errors?: GeneratedProblem['errors'];
    [extra: string]: unknown;
  }
>;

/** `U`, which must be assignable to `T` (a narrower statement of a generated type). */
type Fits<T, U extends T> = U;
