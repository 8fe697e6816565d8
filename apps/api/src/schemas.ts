import {
  COMMIT_VALUES,
  CRITERION_VERDICTS,
  EXECUTION_STATUSES,
  FAILURE_CATEGORIES,
  OPERATION_STATUSES,
  OUTCOME_RESULTS,
  OperationStatus,
  RetryRule,
  TERMINAL_REASONS,
  VerificationMethod,
} from '@verity/status-model';
import { z } from 'zod';
import { CriterionSchema, OperationStatusSchema, SubmissionSchema } from './executions/submission';
import { filledText, refuseHiddenCharacters, refuseInvisible, text } from './http/text';
import { PROBLEM_CODES, problemType } from './problem/problem';

/**
 * Every request and response body of the API as zod: the validators the controllers run, the component schemas of
 * the OpenAPI document (openapi.ts), and what the tests check real responses against. Response objects are strict,
 * so an internal field that leaks into a response fails the contract tests.
 */

// ---------------------------------------------------------------------------------------------------------------
// Requests (besides the submission, in executions/submission.ts)

// A reason and a reviewer's evidence are shown to the next reviewer: nothing in them may hide or reorder what is read.
// A reason given that shows nothing (spaces, U+200B…) would be shown as a reason given (“ ”): leave it out instead.
const REASON_SHOWS_NOTHING =
  'must contain a visible character (not only white space or invisible characters): leave it out to give none';
export const CancelBody = z.strictObject({
  reason: text()
    .max(1000)
    .superRefine(refuseHiddenCharacters({ lines: true }))
    .superRefine(refuseInvisible(REASON_SHOWS_NOTHING))
    .optional(),
});

export const ApprovalBody = z.strictObject({
  decision: z.enum(['approve', 'deny']),
  reason: text()
    .max(2000)
    .superRefine(refuseHiddenCharacters({ lines: true }))
    .superRefine(refuseInvisible(REASON_SHOWS_NOTHING))
    .optional(),
  /**
   * The approval request this decision answers: the operation's `approval.requested_at` as the reviewer was shown it.
   * Given, the decision is taken only while that request is the one waiting: a request asked for since (the grant of
   * the one shown was withdrawn — the source changed, it expired, its key was revoked — and approval asked for again)
   * is not decided unseen (409 already-decided when the request shown was decided, else 412 precondition-failed).
   */
  requested_at: z.iso.datetime({ offset: true }).optional(),
});

/**
 * A resolution ends the hold (VERIFIED, FAILED, CANCELLED, SENT), or records "still unknown after investigation"
 * (MANUAL_REVIEW): the hold stays and the obligation is re-dated, `due_in_seconds` from now (default: the tenant's due
 * time for the hold's reason).
 */
export const ResolveBody = z
  .strictObject({
    status: z.enum([
      OperationStatus.VERIFIED,
      OperationStatus.FAILED,
      OperationStatus.CANCELLED,
      OperationStatus.SENT,
      OperationStatus.MANUAL_REVIEW,
    ]),
    evidence: filledText('evidence text is required')
      .max(10_000)
      .superRefine(refuseHiddenCharacters({ lines: true })),
    due_in_seconds: z
      .number()
      // The range first: 1e20 is "at most 30 days", not "whole seconds" (zod's int check refuses unsafe integers too).
      .min(1, 'at least 1 second')
      .max(30 * 24 * 3600, 'at most 30 days')
      .int('whole seconds')
      .optional(),
  })
  .refine((body) => body.due_in_seconds === undefined || body.status === OperationStatus.MANUAL_REVIEW, {
    message: 'due_in_seconds re-dates a hold that stays: only with status MANUAL_REVIEW',
    path: ['due_in_seconds'],
    params: { rule: 'only_with_still_unknown' },
  });

// ---------------------------------------------------------------------------------------------------------------
// Responses

const DateTime = z.iso.datetime();
const Json = z.record(z.string(), z.unknown());

// The enums and objects that several schemas share are components of their own (API_SCHEMAS below): the document
// names each once and refers to it, and the SDK's generated types name them (`components['schemas']['Failure']`).
// Each is one zod instance, used as is: a copy (`z.enum(...)` written again) would be written out inline again.
const ExecutionStatus = z.enum(EXECUTION_STATUSES as [string, ...string[]]);
const TerminalReason = z.enum(TERMINAL_REASONS as [string, ...string[]]);
const Commit = z.enum(COMMIT_VALUES as [string, ...string[]]);
const RetryRuleEnum = z.enum(Object.values(RetryRule) as [RetryRule, ...RetryRule[]]);
const FailureCategory = z.enum(FAILURE_CATEGORIES as [string, ...string[]]);
const ResolutionStatus = z.enum([
  OperationStatus.VERIFIED,
  OperationStatus.FAILED,
  OperationStatus.CANCELLED,
  OperationStatus.SENT,
]);

/**
 * A FAILED resolution re-reads the source first, and so does a VERIFIED where the provider's own lookup can answer that
 * the effect does not exist; what the read found is kept (for a FAILED: absent, or it could not say; for a VERIFIED:
 * anything but an absence that refutes it — the effect found, found with other values, or a source that cannot say).
 */
const ResolutionReadBack = z.looseObject({
  kind: z.enum(['found', 'mismatch', 'absent', 'stale', 'field_missing', 'unreachable']),
  source: z.string(),
  read_at: DateTime,
});

const Resolution = z.object({
  status: ResolutionStatus,
  evidence: z.string(),
  by: z.string(),
  at: DateTime,
  read_back: ResolutionReadBack.optional(),
});

const Approval = z.looseObject({
  /**
   * `withdrawn`: asked for, never decided, and no longer decidable — the operation ended (cancelled with its
   * execution, expired, a dependency failed) or is held for a reviewer's resolution (a release grants it with it).
   */
  state: z.enum(['requested', 'granted', 'denied', 'withdrawn']),
  requested_at: DateTime.optional(),
  decided_at: DateTime.optional(),
  decided_by: z.string().optional(),
  reason: z.string().optional(),
  expires_at: DateTime.optional(),
});

const RecoveryObligation = z.looseObject({
  reason: z.string(),
  owner: z.string(),
  evidence_required: z.string(),
  permitted_actions: z.array(z.string()),
  due_at: DateTime,
  escalation_target: z.string(),
  escalated_at: DateTime.nullable(),
  resolution: Resolution.optional(),
  /** How many times the source was read again while held (automatic re-checks and a reviewer's requests). */
  rechecks: z.number().int().optional(),
  /** A re-check made while held showed the effect (found, or found with other values): FAILED is refused since. */
  effect_shown: z.strictObject({ result: z.string(), evidence: z.unknown(), at: DateTime }).optional(),
  /** On a FAILED operation: a read of the source after the resolution showed the effect (commit unknown, no retry). */
  effect_shown_after_failed: z.strictObject({ result: z.string(), at: DateTime }).optional(),
  /**
   * "Still unknown after investigation" records, oldest first (at most 100 per hold, their evidence at most 64 KiB of
   * UTF-8 together); each re-dated the obligation.
   */
  investigations: z
    .array(
      z.strictObject({
        evidence: z.string(),
        by: z.string(),
        at: DateTime,
        previous_due_at: DateTime,
        due_at: DateTime,
      }),
    )
    .optional(),
});

/** Reference 004's failure object: on failed, expired and cancelled executions and on FAILED, CANCELLED and
 * MANUAL_REVIEW operations (the code table is in docs/api.md and GET /v1/status-model). */
const Failure = z.strictObject({
  code: z.string(),
  phase: z.string(),
  category: FailureCategory,
  retryable: z.boolean(),
  message: z.string(),
  at: DateTime,
});

/**
 * The provider's answer to a send that came back after the send was marked UNKNOWN (a late rejection), as its connector
 * classified it: never the provider's body.
 */
const LateRejection = z.strictObject({
  /** CONNECTOR_REJECTED (the provider's 4xx), or SOURCE_UNREACHABLE (never delivered). */
  reason: z.string(),
  /** In words, with the HTTP status: "provider rejected the request (402)". */
  detail: z.string(),
  /** The provider's error code, when its answer had one: `{ "code": "card_declined" }`. */
  provider_error: Json.optional(),
  /** A send refused by a rule before any call: its cause and the rule in words. */
  cause: z.string().optional(),
  refusal: z.string().optional(),
});

/** An earlier attempt of an operation's request (one up its chain of retries) and how it ended. */
const EarlierAttempt = z.strictObject({
  operation_id: z.string().startsWith('op_'),
  execution_id: z.string().startsWith('exe_'),
  status: OperationStatusSchema,
  terminal_reason: TerminalReason.nullable(),
  denied_by: z
    .string()
    .nullable()
    .meta({ description: 'Where a reviewer denied its approval: the id of the key that did; otherwise null.' }),
  denied_at: DateTime.nullable(),
  reason: z.string().nullable().meta({ description: 'The reason the reviewer gave for the denial, if any.' }),
});

const Operation = z.strictObject({
  id: z.string().startsWith('op_'),
  execution_id: z.string().startsWith('exe_'),
  key: z.string(),
  connector: z.string(),
  action: z.string(),
  params: Json,
  irreversible: z.boolean(),
  requires_approval: z.boolean(),
  verification_method: z.enum([VerificationMethod.READ_AFTER_WRITE, '']),
  expected_state: Json.nullable(),
  depends_on: z.array(z.string()),
  status: OperationStatusSchema,
  terminal_reason: TerminalReason.nullable(),
  commit: Commit,
  failure: Failure.nullable(),
  retry: RetryRuleEnum,
  attempt: z.number().int().min(0),
  no_change_required: z.boolean(),
  evidence: Json.nullable(),
  observation: z.enum(['converged', 'superseded', 'degraded', 'unavailable']).nullable(),
  approval: Approval.nullable(),
  recovery_obligation: RecoveryObligation.nullable(),
  retry_of: z.string().startsWith('op_').nullable(),
  earlier_attempts: z.array(EarlierAttempt).meta({
    description:
      'For a retry: the earlier attempts of the same request (its chain of retries, `retry_of` followed back), nearest ' +
      'first: the 10 nearest and, further back, any of the 3 nearest denials of the chain (its own included), with how ' +
      'each ended and, for a denied one, who denied it, when and why. Empty otherwise.',
  }),
  sent_at: DateTime.nullable(),
  acknowledged_at: DateTime.nullable(),
  /**
   * When the provider's rejection of the send came back after the send was marked UNKNOWN (a late 4xx), with what it
   * said: a person's VERIFIED is refused while it is set, and a VERIFIED it came after has commit `unknown`.
   */
  rejected_at: DateTime.nullable(),
  rejection: LateRejection.nullable(),
  created_at: DateTime,
  updated_at: DateTime,
});

const EffectCounts = z.strictObject(
  Object.fromEntries(OPERATION_STATUSES.map((s) => [s, z.number().int().min(0)])) as Record<
    OperationStatus,
    z.ZodNumber
  >,
);

const Execution = z.strictObject({
  id: z.string().startsWith('exe_'),
  agent_id: z.string(),
  intent: z.string(),
  status: ExecutionStatus,
  effects: z.strictObject({
    summary: z.enum(['all_verified', 'partial', 'none', 'unverified', 'unknown']),
    counts: EffectCounts,
    commit: z.strictObject(
      Object.fromEntries(COMMIT_VALUES.map((c) => [c, z.number().int().min(0)])) as Record<string, z.ZodNumber>,
    ),
    no_change_required: z.number().int().min(0),
    not_sent: z.number().int().min(0),
    held_not_sent: z.number().int().min(0),
  }),
  failure: Failure.nullable(),
  criteria: z.array(CriterionSchema),
  criteria_results: z
    .array(
      z.looseObject({
        key: z.string(),
        operation: z.string(),
        verdict: z.enum(CRITERION_VERDICTS as [string, ...string[]]),
        rationale: z.string().optional(),
        evidence_event_ids: z.array(z.string()),
      }),
    )
    .nullable(),
  outcome: z
    .strictObject({
      result: z.enum(OUTCOME_RESULTS as [string, ...string[]]),
      evaluated_at: DateTime.meta({
        description:
          'When the verdicts were last written; before the first evaluation, the submission time (result pending, each verdict "not evaluated yet").',
      }),
    })
    .nullable()
    .meta({
      description:
        'The overall result of the criteria, kept current as operations change; null only without criteria. Until ' +
        'the first evaluation: pending, each criterion pending ("not evaluated yet").',
    }),
  deadline_at: DateTime,
  created_at: DateTime,
  updated_at: DateTime,
  trace_id: z
    .string()
    .regex(/^[0-9a-f]{32}$/)
    .nullable()
    .meta({ description: 'The OpenTelemetry trace of this execution; null when the server runs without traces.' }),
  operations: z.array(Operation),
});

const Event = z.strictObject({
  id: z.string().startsWith('evt_'),
  execution_id: z.string().startsWith('exe_'),
  operation_id: z.string().startsWith('op_').nullable(),
  seq: z.number().int().min(1),
  type: z.string(),
  from_status: z.string().nullable(),
  to_status: z.string().nullable(),
  data: Json,
  created_at: DateTime,
});

const FieldError = z.strictObject({ field: z.string(), rule: z.string(), message: z.string() });

/** RFC 9457. `errors` on validation problems; a few problems carry their own extras (status, retry, permitted...). */
const ProblemTypes = PROBLEM_CODES.map(problemType);
const Problem = z.looseObject({
  /** One URL per code of PROBLEM_CODES (`https://verity.dev/problems/not-found`): the SDK's problem codes come from here. */
  type: z.enum(ProblemTypes as [(typeof ProblemTypes)[number], ...typeof ProblemTypes]),
  title: z.string(),
  status: z.number().int().min(400).max(599),
  detail: z.string().optional(),
  instance: z.string().optional(),
  errors: z.array(FieldError).optional(),
});

/** What a connector, and each of its actions, can prove: the limitations table. */
const CapabilityFields = {
  read_back: z.boolean(),
  context_read: z.boolean(),
  provider_idempotency: z.boolean(),
  reversible: z.boolean(),
  can_reach_verified: z.boolean(),
};

const Connector = z.strictObject({
  name: z.string(),
  description: z.string(),
  ...CapabilityFields,
  actions: z.array(
    z.strictObject({
      name: z.string(),
      description: z.string(),
      ...CapabilityFields,
      /** A capability that holds only for some operations of the action, and when (e.g. http needs params.read_back). */
      conditions: z.record(z.string(), z.string()),
      params_schema: Json,
    }),
  ),
});

const StatusModel = z.strictObject({
  operation: z.strictObject({
    statuses: z.array(
      z.strictObject({
        status: OperationStatusSchema,
        terminal: z.boolean(),
        retry: RetryRuleEnum,
        meaning: z.string(),
      }),
    ),
    transitions: z.array(
      z.strictObject({
        from: OperationStatusSchema,
        to: OperationStatusSchema,
        reasons: z.array(z.string()),
        reason_required: z.boolean(),
        human_only: z.boolean(),
        never_sent_only: z.boolean(),
        sent_only: z.boolean(),
        refused_when_held_for: z.array(z.string()),
        refused_when_acknowledged: z.boolean(),
        refused_when_effect_shown: z.boolean(),
        refused_when_rejected: z.boolean(),
        system_when_held_for: z.array(z.string()),
        system_when_execution_ended: z.boolean(),
        extension: z.boolean(),
        why: z.string(),
      }),
    ),
    terminal_reasons: z.array(z.string()),
    retry_rules: z.array(z.string()),
    verification_methods: z.array(z.string()),
    verification_rule: z.string(),
    commit: z.strictObject({
      values: z.array(z.strictObject({ value: Commit, meaning: z.string() })),
      rules: z.array(
        z.strictObject({
          status: OperationStatusSchema,
          ever_sent: z.union([z.boolean(), z.literal('any')]),
          terminal_reason: z.string(),
          commit: Commit,
        }),
      ),
    }),
  }),
  failure: z.strictObject({
    categories: z.array(z.string()),
    codes: z.array(
      z.strictObject({
        code: z.string(),
        applies_to: z.enum(['execution', 'operation']),
        status: z.string(),
        phase: z.string(),
        category: FailureCategory,
        retryable: z.boolean(),
        message: z.string(),
      }),
    ),
  }),
  outcome: z.strictObject({ results: z.array(z.string()), verdicts: z.array(z.string()) }),
  execution: z.strictObject({
    statuses: z.array(z.string()),
    terminal: z.array(z.string()),
    transitions: z.array(z.strictObject({ from: z.string(), to: z.array(z.string()) })),
  }),
});

const Check = z.enum(['up', 'down']);

const Count = z.number().int().min(0);

/** An execution as the review queues show it beside each operation. */
const ExecutionSummary = z.strictObject({
  id: z.string().startsWith('exe_'),
  status: ExecutionStatus,
  agent_id: z.string(),
  intent: z.string(),
  created_at: DateTime,
});

/** Component schemas of the OpenAPI document, by name. */
export const API_SCHEMAS = {
  OperationStatus: OperationStatusSchema,
  ExecutionStatus,
  TerminalReason,
  Commit,
  RetryRule: RetryRuleEnum,
  FailureCategory,
  ResolutionStatus,
  Failure,
  Approval,
  RecoveryObligation,
  Submission: SubmissionSchema,
  Criterion: CriterionSchema,
  CancelRequest: CancelBody,
  ApprovalRequest: ApprovalBody,
  ResolveRequest: ResolveBody,
  Resolution,
  Operation,
  OperationDetail: Operation.extend({
    permitted_resolutions: z.array(ResolutionStatus),
    resolution_options: z.array(
      z.strictObject({
        status: ResolutionStatus,
        permitted: z.boolean(),
        why: z.string(),
        check: z.enum(['read_back']).nullable(),
        available_at: DateTime.nullable(),
      }),
    ),
  }),
  Execution,
  ExecutionList: z.strictObject({ data: z.array(Execution), next_cursor: z.string().nullable() }),
  Event,
  EventList: z.strictObject({ data: z.array(Event), next_cursor: z.string().nullable() }),
  RetryResult: z.strictObject({ operation: Operation, execution: Execution }),
  ConnectorList: z.strictObject({ data: z.array(Connector) }),
  StatusModel,
  Index: z.strictObject({
    name: z.literal('Verity'),
    description: z.string(),
    links: z.strictObject({
      docs: z.string(),
      openapi: z.string(),
      console: z.string(),
      health: z.string(),
      status_model: z.string(),
      connectors: z.string(),
      executions: z.string(),
    }),
  }),
  Liveness: z.strictObject({ status: z.literal('ok') }),
  Readiness: z.strictObject({
    status: z.literal('ok'),
    checks: z.strictObject({
      postgres: Check,
      redis: Check,
      schema: Check.describe('the database schema this code needs is migrated (its last migration has run)'),
    }),
  }),
  ReviewSummary: z.strictObject({
    approvals: Count,
    manual_reviews: Count,
    escalated: Count,
    overdue: Count,
    as_of: DateTime,
    can_decide: z
      .boolean()
      .describe(
        'whether this key may approve, deny and resolve (the reviewer role); an admin reads the queues but decides nothing',
      ),
  }),
  ReviewQueue: z.strictObject({
    data: z.array(z.strictObject({ operation: Operation, execution: ExecutionSummary.nullable() })),
    total: Count.describe('every match of the filter, not just this page'),
    next_cursor: z.string().nullable(),
  }),
  Problem,
} as const;

export type SchemaName = keyof typeof API_SCHEMAS;
