import { ProblemCode, problemType } from './problem/problem';

/**
 * The examples of the OpenAPI document: the README's submission, what the API answered for it in a real run, and
 * one body per problem the API sends. Swagger UI pre-fills "Try it out" from these, so they must be requests the API
 * accepts; openapi.spec.ts checks every one against the zod schema it illustrates, and the Redocly lint in
 * test/e2e/openapi.test.ts against the served document.
 */

/** The README's "Try it" submission: a charge that can be read back and an SMS that cannot. */
export const SUBMISSION_EXAMPLE = {
  agent_id: 'billing-bot',
  intent: 'Charge order 1234',
  operations: [
    {
      key: 'charge',
      connector: 'sandbox.payments',
      action: 'charge',
      params: { amount: 1250, currency: 'EUR', reference: 'order-1234' },
    },
    {
      key: 'notify',
      connector: 'sandbox.sms',
      action: 'send',
      params: { to: '+15550100', body: 'Paid', client_ref: 'order-1234-sms' },
      depends_on: ['charge'],
    },
  ],
  criteria: [{ key: 'paid', operation: 'charge', expect_status: 'VERIFIED' }],
};

const EXECUTION_ID = 'exe_01m8pvhh2er6qkdabxc471q72t';
const CHARGE_ID = 'op_01m8pvhh2eyfvxnkaq1cqt2qvy';
const SMS_ID = 'op_01m8pvhh2edzc62e9xzfmmgt76';
const CREATED_AT = '2026-05-04T09:30:13.327Z';
const ZERO_COUNTS = {
  PREPARED: 0,
  SENT: 0,
  ACKNOWLEDGED: 0,
  VERIFIED: 0,
  UNKNOWN: 0,
  RECONCILING: 0,
  FAILED: 0,
  MANUAL_REVIEW: 0,
  CANCELLED: 0,
};

const OPERATION_DEFAULTS = {
  execution_id: EXECUTION_ID,
  irreversible: true,
  requires_approval: false,
  expected_state: null,
  terminal_reason: null,
  failure: null,
  no_change_required: false,
  approval: null,
  recovery_obligation: null,
  retry_of: null,
  earlier_attempts: [],
  created_at: CREATED_AT,
};

/** The charge once read back from the provider: VERIFIED, with the record it read stored as evidence. */
export const VERIFIED_OPERATION_EXAMPLE = {
  ...OPERATION_DEFAULTS,
  id: CHARGE_ID,
  key: 'charge',
  connector: 'sandbox.payments',
  action: 'charge',
  params: { amount: 1250, currency: 'EUR', reference: 'order-1234' },
  verification_method: 'read_after_write' as const,
  depends_on: [],
  status: 'VERIFIED' as const,
  commit: 'committed',
  retry: 'not_needed' as const,
  attempt: 1,
  evidence: {
    method: 'read_after_write',
    record: {
      id: 'ch_161bcc77f069fd9a8e914dc9',
      amount: 1250,
      status: 'succeeded',
      version: 1,
      currency: 'EUR',
      reference: 'order-1234',
    },
    source: 'http://localhost:4010/v1/charges?reference=order-1234',
    read_at: '2026-05-04T09:30:13.552Z',
    as_of_version: 1,
  },
  observation: 'converged' as const,
  sent_at: '2026-05-04T09:30:13.482Z',
  acknowledged_at: '2026-05-04T09:30:13.505Z',
  rejected_at: null,
  rejection: null,
  updated_at: '2026-05-04T09:30:13.555Z',
};

/** The SMS: sent and acknowledged by the provider, which offers no way to read it back, so ACKNOWLEDGED is its end. */
const ACKNOWLEDGED_SMS = {
  ...OPERATION_DEFAULTS,
  id: SMS_ID,
  key: 'notify',
  connector: 'sandbox.sms',
  action: 'send',
  params: { to: '+15550100', body: 'Paid', client_ref: 'order-1234-sms' },
  verification_method: '' as const,
  depends_on: ['charge'],
  status: 'ACKNOWLEDGED' as const,
  commit: 'unknown',
  retry: 'wait' as const,
  attempt: 1,
  evidence: null,
  observation: null,
  sent_at: '2026-05-04T09:30:13.657Z',
  acknowledged_at: '2026-05-04T09:30:13.675Z',
  rejected_at: null,
  rejection: null,
  updated_at: '2026-05-04T09:30:13.675Z',
};

/** The README's submission once done: the charge VERIFIED, the SMS ACKNOWLEDGED, the criterion met. */
export const VERIFIED_EXECUTION_EXAMPLE = {
  id: EXECUTION_ID,
  agent_id: 'billing-bot',
  intent: 'Charge order 1234',
  status: 'completed',
  effects: {
    counts: { ...ZERO_COUNTS, ACKNOWLEDGED: 1, VERIFIED: 1 },
    summary: 'unverified' as const,
    commit: { not_dispatched: 0, committed: 1, rejected: 0, unknown: 1 },
    no_change_required: 0,
    not_sent: 0,
    held_not_sent: 0,
  },
  failure: null,
  criteria: [{ key: 'paid', operation: 'charge', expect_status: 'VERIFIED' as const }],
  criteria_results: [
    {
      key: 'paid',
      verdict: 'pass',
      operation: 'charge',
      rationale: '"charge" is VERIFIED',
      expect_status: 'VERIFIED',
      evidence_event_ids: ['evt_01m8pvhh9gtx1v9h3cbv1qxxrf'],
    },
  ],
  outcome: { result: 'satisfied', evaluated_at: '2026-05-04T09:30:13.588Z' },
  deadline_at: '2026-05-04T09:40:13.327Z',
  created_at: CREATED_AT,
  updated_at: '2026-05-04T09:30:13.687Z',
  trace_id: '4bf92f3577b34da6a3ce929d0e0e4736',
  operations: [VERIFIED_OPERATION_EXAMPLE, ACKNOWLEDGED_SMS],
};

/** What POST /v1/executions answers for the README's submission: committed, nothing sent yet. */
export const CREATED_EXECUTION_EXAMPLE = {
  ...VERIFIED_EXECUTION_EXAMPLE,
  status: 'created',
  effects: {
    counts: { ...ZERO_COUNTS, PREPARED: 2 },
    summary: 'none' as const,
    commit: { not_dispatched: 2, committed: 0, rejected: 0, unknown: 0 },
    no_change_required: 0,
    not_sent: 2,
    held_not_sent: 0,
  },
  // Not evaluated yet: the criteria are shown pending until the dispatcher's first evaluation is written.
  criteria_results: [
    {
      key: 'paid',
      verdict: 'pending',
      operation: 'charge',
      rationale: 'not evaluated yet',
      expect_status: 'VERIFIED',
      evidence_event_ids: [],
    },
  ],
  outcome: { result: 'pending', evaluated_at: CREATED_AT },
  updated_at: CREATED_AT,
  operations: [VERIFIED_OPERATION_EXAMPLE, ACKNOWLEDGED_SMS].map((op) => ({
    ...op,
    status: 'PREPARED' as const,
    commit: 'not_dispatched',
    retry: 'none' as const,
    attempt: 0,
    evidence: null,
    observation: null,
    sent_at: null,
    acknowledged_at: null,
    rejected_at: null,
    rejection: null,
    updated_at: CREATED_AT,
  })),
};

export const OPERATION_DETAIL_EXAMPLE = {
  ...VERIFIED_OPERATION_EXAMPLE,
  permitted_resolutions: [],
  resolution_options: [],
};

export const EVENT_LIST_EXAMPLE = {
  data: [
    {
      id: 'evt_01m8pvhh2fq4m3a0jv9mrc2x1d',
      execution_id: EXECUTION_ID,
      operation_id: null,
      seq: 1,
      type: 'execution.created',
      from_status: null,
      to_status: 'created',
      data: { operations: 2, by: 'key_01jq4m2r8v' },
      created_at: CREATED_AT,
    },
    {
      id: 'evt_01m8pvhh9gtx1v9h3cbv1qxxrf',
      execution_id: EXECUTION_ID,
      operation_id: CHARGE_ID,
      seq: 11,
      type: 'operation.status_changed',
      from_status: 'ACKNOWLEDGED',
      to_status: 'VERIFIED',
      data: { method: 'read_after_write' },
      created_at: '2026-05-04T09:30:13.555Z',
    },
  ],
  next_cursor: null,
};

export const CANCEL_EXAMPLE = { reason: 'the customer withdrew the order' };
export const APPROVAL_EXAMPLE = { decision: 'approve', reason: 'amount within the order total' };
export const RESOLVE_EXAMPLE = {
  status: 'VERIFIED',
  evidence: 'charge ch_161bcc77f069fd9a8e914dc9 found in the provider dashboard, 12.50 EUR, order-1234',
};

export const POLICY_EXAMPLE = {
  obligation_owner: 'payments-oncall',
  escalation_target: 'finance-lead',
  obligation_due_seconds: { default: 14400, SOURCE_UNREACHABLE: 3600 },
  approval_rules: [{ connector: 'sandbox.payments', amount_above: 50000, amount_field: 'amount', currency: 'EUR' }],
};

export const CONNECTOR_SETTINGS_EXAMPLE = {
  allow_hosts: [{ host: 'api.example.org', ports: [443], secrets: ['API_TOKEN'] }],
  spending_caps: [{ period: 'day', max_operations: 1000 }],
  read_back_binding: 'bound',
  secrets: { API_TOKEN: 'tok_live_a1b2c3' },
};

interface ProblemExample {
  status: number;
  title: string;
  detail: string;
  extras?: Record<string, unknown>;
  /** What the example shows, when one status has several problems. */
  summary: string;
}

/**
 * Every problem the API sends, by its type's last segment, with a real detail. The type URL is PROBLEM_BASE + code;
 * `instance` is the request path.
 */
export const PROBLEMS = {
  'validation-error': {
    status: 400,
    title: 'The request is invalid',
    detail: 'operations[0].params.amount: Too small: expected number to be >0',
    extras: {
      errors: [
        { field: 'operations[0].params.amount', rule: 'too_small', message: 'Too small: expected number to be >0' },
      ],
    },
    summary: 'A field breaks a rule: `errors[]` names each field and rule',
  },
  'bad-request': {
    status: 400,
    title: 'Bad Request',
    detail: 'Failed to decode param',
    summary: 'The URL could not be decoded',
  },
  unauthorized: {
    status: 401,
    title: 'Unauthorized',
    detail: 'send Authorization: Bearer <api key>',
    summary: 'No key, or an unknown or revoked one',
  },
  forbidden: {
    status: 403,
    title: 'Forbidden',
    detail: 'this endpoint needs the reviewer role',
    summary: 'The key’s role may not do this',
  },
  'operator-not-tenant': {
    status: 403,
    title: 'Forbidden',
    detail: 'an operator key belongs to no tenant and reads no tenant’s data; use a key of the tenant',
    summary: 'An operator key on a tenant’s route',
  },
  'not-found': {
    status: 404,
    title: 'Execution not found',
    detail: 'no execution exe_01m8pvhh2er6qkdabxc471q72t is visible to this key',
    summary: 'Nothing with this id is visible to this key (other tenants’ resources never are)',
  },
  'method-not-allowed': {
    status: 405,
    title: 'Method not allowed',
    detail:
      'this MCP server keeps no session state: send each JSON-RPC message as a POST; there is no server-initiated stream and no session to end',
    summary: 'Only POST reaches the MCP endpoint (see Allow)',
  },
  'request-timeout': {
    status: 408,
    title: 'Request timeout',
    detail: 'the request body did not arrive within 30 s',
    summary: 'The body did not arrive in time',
  },
  'idempotency-key-in-flight': {
    status: 409,
    title: 'Conflict with the current state',
    detail: 'a request with this Idempotency-Key is still being processed; retry shortly',
    summary: 'The same key is still in flight',
  },
  'execution-terminal': {
    status: 409,
    title: 'Conflict with the current state',
    detail: 'the execution is already completed',
    extras: { current_status: 'completed' },
    summary: 'The execution already ended',
  },
  'already-decided': {
    status: 409,
    title: 'Conflict with the current state',
    detail: 'the operation was already granted (decided by key_01jq4m2r8v at 2026-11-30T10:02:11.204Z)',
    extras: {
      decision: 'approve',
      decided_by: 'key_01jq4m2r8v',
      decided_at: '2026-11-30T10:02:11.204Z',
      approval: 'granted',
      current_status: 'PREPARED',
    },
    summary: 'Someone decided first (`decision` is the winner’s)',
  },
  'not-awaiting-approval': {
    status: 409,
    title: 'Conflict with the current state',
    detail: 'the operation is SENT; only a PREPARED operation can be approved',
    extras: { current_status: 'SENT' },
    summary: 'The operation does not wait for approval',
  },
  'operation-moved': {
    status: 409,
    title: 'Conflict with the current state',
    detail: 'the operation moved on to VERIFIED; reload it',
    extras: { current_status: 'VERIFIED' },
    summary: 'The operation changed while the request was decided',
  },
  'resolution-not-permitted': {
    status: 409,
    title: 'Conflict with the current state',
    detail: 'the operation is VERIFIED, not MANUAL_REVIEW',
    extras: { current_status: 'VERIFIED', permitted_resolutions: [], resolution_options: [] },
    summary: 'The status model does not permit this resolution',
  },
  'effect-exists': {
    status: 409,
    title: 'Conflict with the current state',
    detail: 'the source shows this effect now: it cannot be marked as not having happened',
    extras: { read_back: { kind: 'found', evidence: { reference: 'order-1234', status: 'succeeded' } } },
    summary: 'FAILED refused: reading the source found the effect',
  },
  'not-in-review': {
    status: 409,
    title: 'Conflict with the current state',
    detail: 'the operation is VERIFIED; only a MANUAL_REVIEW operation is re-checked',
    extras: { current_status: 'VERIFIED' },
    summary: 'Only a held operation is re-checked',
  },
  'cannot-read-back': {
    status: 409,
    title: 'Conflict with the current state',
    detail: 'sandbox.sms cannot read this operation back; its outcome can only be established outside Verity',
    extras: { current_status: 'MANUAL_REVIEW' },
    summary: 'Nothing can read this operation back',
  },
  'retry-not-allowed': {
    status: 409,
    title: 'Conflict with the current state',
    detail: 'retry is forbidden for an operation in UNKNOWN',
    extras: { retry: 'forbidden', current_status: 'UNKNOWN' },
    summary: 'The retry rule of its status forbids a new attempt',
  },
  'already-retried': {
    status: 409,
    title: 'Conflict with the current state',
    detail: 'operation op_01m8pvhh2eyfvxnkaq1cqt2qvy was already retried',
    extras: {
      retry: 'safe',
      current_status: 'FAILED',
      retried_by: { operation_id: 'op_01m8pvj2x4dq0c8w7k3n6y9b5t', execution_id: 'exe_01m8pvj2x4a1p7r2s9d3f6g8hk' },
    },
    summary: 'A retry of this operation exists',
  },
  'denial-limit-reached': {
    status: 409,
    title: 'Conflict with the current state',
    detail:
      'the request of operation op_01m8pvhh2eyfvxnkaq1cqt2qvy was denied 3 times (itself and its earlier attempts): ' +
      'a retry would ask reviewers for it again',
    extras: { retry: 'forbidden', current_status: 'CANCELLED', rule: 'denial_limit', denials: 3, limit: 3 },
    summary: 'Reviewers denied this request as many times as a chain of retries may be denied',
  },
  'reference-unsettled': {
    status: 409,
    title: 'Conflict with the current state',
    detail:
      'operation op_01m8pvhh2eyfvxnkaq1cqt2qvy ("notify" of exe_01m8pvhh2a9x3k7m4q2w8e5r6t) names this sandbox.sms ' +
      'client_ref and is MANUAL_REVIEW: it was sent and whether it made its effect is not settled (the provider does ' +
      'not deduplicate, so sending again could make it twice). Wait until it settles, or have a reviewer resolve it, ' +
      'then submit again',
    extras: {
      field: 'operations[0].params.client_ref',
      unsettled: {
        operation_id: 'op_01m8pvhh2eyfvxnkaq1cqt2qvy',
        execution_id: 'exe_01m8pvhh2a9x3k7m4q2w8e5r6t',
        key: 'notify',
        status: 'MANUAL_REVIEW',
      },
    },
    summary: 'Another send of this reference is not settled: this one would be a blind re-send',
  },
  'illegal-transition': {
    status: 409,
    title: 'Conflict with the current state',
    detail: 'operation VERIFIED -> FAILED refused: no such transition',
    extras: { rule: 'ILLEGAL_TRANSITION', from: 'VERIFIED', to: 'FAILED' },
    summary: 'The status model forbids this move',
  },
  'idempotency-key-target-deleted': {
    status: 409,
    title: 'Conflict with the current state',
    detail:
      'the webhook endpoint whk_01J9Z4K3V7Q2M8N5P6R7S8T9UA this Idempotency-Key created has been deleted since; use a new key to create another',
    extras: { webhook_id: 'whk_01J9Z4K3V7Q2M8N5P6R7S8T9UA' },
    summary: 'The endpoint the key’s first request created was deleted since',
  },
  'idempotency-replay-unavailable': {
    status: 409,
    title: 'Conflict with the current state',
    detail:
      'the signing secret of the webhook endpoint whk_01J9Z4K3V7Q2M8N5P6R7S8T9UA this Idempotency-Key created cannot be shown again: it does not open with this SECRETS_KEY (not the key it was sealed with); set that key to replay the answer, or delete the endpoint and create another with a new key',
    extras: { webhook_id: 'whk_01J9Z4K3V7Q2M8N5P6R7S8T9UA' },
    summary: 'The replay of a create cannot be given: the endpoint’s secret no longer opens (SECRETS_KEY changed)',
  },
  'webhook-limit': {
    status: 409,
    title: 'Conflict with the current state',
    detail: 'this tenant already has 20 webhook endpoints; delete one first',
    summary: 'The tenant has as many webhook endpoints as it may',
  },
  'secret-limit': {
    status: 409,
    title: 'Conflict with the current state',
    detail:
      'a tenant holds at most 100 secrets for http (this change would make 101); delete some first (null as a value, or DELETE …/secrets/{name})',
    summary: 'The tenant would hold more secrets for the connector than it may',
  },
  'endpoint-disabled': {
    status: 409,
    title: 'Conflict with the current state',
    detail: 'webhook whk_01m8pvhh2eyfvxnkaq1cqt2qvy is disabled; enable it first (POST …/enable)',
    summary: 'The endpoint is disabled: nothing is sent to it',
  },
  'delivery-pending': {
    status: 409,
    title: 'Conflict with the current state',
    detail:
      'delivery msg_01m8pvj3q6x0m2a9t5c7e1r4kb is still being sent (redelivery 1, not settled); ' +
      'redeliver it once it has settled (delivered, failed or skipped)',
    summary: 'The message is still being sent: another round would send it twice',
  },
  'precondition-failed': {
    status: 412,
    title: 'Precondition failed',
    detail:
      'the policy changed since the version If-Match names; nothing was written: read it again (GET, its ETag), ' +
      'apply your change to what it is now, and send it with the new ETag',
    summary: 'Changed since it was read: the If-Match version is no longer current',
  },
  'payload-too-large': {
    status: 413,
    title: 'The request body is too large',
    detail: 'the body limit is 256 KiB',
    extras: { errors: [{ field: '(body)', rule: 'max_bytes', message: 'at most 262144 bytes' }] },
    summary: 'The body is larger than 256 KiB',
  },
  'unsupported-media-type': {
    status: 415,
    title: 'Unsupported media type',
    detail: 'send Content-Type: application/json',
    summary: 'The body is not JSON (or not UTF-8, or compressed)',
  },
  'idempotency-key-reused': {
    status: 422,
    title: 'Idempotency-Key reused with a different body',
    detail: 'this Idempotency-Key was first used with a different request body; use a new key for a new request',
    summary: 'Same key, different body',
  },
  'rate-limited': {
    status: 429,
    title: 'Too many requests',
    detail: 'retry in 12 s',
    summary: 'The key’s rate limit is used up, or it has too many requests in flight (see Retry-After)',
  },
  'too-many-failed-authentications': {
    status: 429,
    title: 'Too many failed authentications',
    detail: 'retry in 41 s',
    summary: 'This address presented too many unknown keys (see Retry-After)',
  },
  'too-many-streams': {
    status: 429,
    title: 'Too many open streams',
    detail: 'at most 20 per key, across all API processes',
    summary: 'The key holds its limit of open streams',
  },
  'too-many-mcp-requests': {
    status: 429,
    title: 'Too many MCP requests in flight',
    detail:
      'at most 100 MCP requests of one key at once in each API process (this POST carries 1); nothing in it was carried out: send it again once an answer has come',
    summary:
      'The key, its tenant (all its keys) or this API process holds its limit of MCP requests in flight (see Retry-After)',
  },
  internal: {
    status: 500,
    title: 'Internal error',
    detail: 'an unexpected error occurred; it has been logged',
    summary: 'A fault of the API; quote x-request-id',
  },
  'database-unavailable': {
    status: 503,
    title: 'Service unavailable',
    detail: 'the database cannot be reached; nothing was written',
    summary: 'Postgres cannot be reached; nothing was written (see Retry-After)',
  },
  'queue-unavailable': {
    status: 503,
    title: 'Service unavailable',
    detail: 'the job queue (Redis) cannot be reached: the re-check was not asked for; ask again',
    summary:
      'Redis cannot be reached, and the request is nothing but Redis (a re-check, Bull Board): nothing was done (see Retry-After)',
  },
  'secrets-unreadable': {
    status: 503,
    title: 'Service unavailable',
    detail:
      'this API process cannot open the tenant’s connector secrets (its SECRETS_KEY is not the key they were sealed with), so it gives no answer that could hold one of their values; nothing was changed: ask again once the key is set right',
    summary:
      'This API process’s SECRETS_KEY does not open the tenant’s connector secrets, so no answer is given unredacted (see Retry-After)',
  },
  'answers-busy': {
    status: 503,
    title: 'Too many large answers in flight',
    detail:
      'this API process is writing out as many answers as it holds memory for (ANSWER_BYTES_IN_FLIGHT, 33554432 bytes of stored text; this answer holds 19871234); nothing was carried out: send it again in a moment',
    summary:
      'This API process holds as many answers (their stored text) as its memory allows, and this one waited its turn in vain; nothing was carried out (see Retry-After)',
  },
  'api-stopping': {
    status: 503,
    title: 'Service unavailable',
    detail: 'this API process is stopping; nothing in the request was carried out: send it again',
    summary: 'POST /mcp: this API process has begun to stop; nothing in the POST was carried out (see Retry-After)',
  },
  'not-ready': {
    status: 503,
    title: 'Not ready',
    detail: 'not ready: redis is down',
    extras: { checks: { postgres: 'up', redis: 'down', schema: 'up' } },
    summary: 'GET /health/ready: a dependency is down; `checks` gives each one',
  },
} satisfies Record<ProblemCode, ProblemExample>;

export type { ProblemCode } from './problem/problem';

/** The problem as the API renders it (see sendProblem): extensions, then the RFC 9457 members. */
export function problemBody(code: ProblemCode, instance = '/v1/executions/exe_01m8pvhh2er6qkdabxc471q72t') {
  const p: ProblemExample = PROBLEMS[code];
  return {
    ...p.extras,
    type: problemType(code),
    title: p.title,
    status: p.status,
    detail: p.detail,
    instance,
  };
}
