import {
  ExecutionStatus,
  LastStatusChange,
  OperationStatus,
  RECHECK_OWED_STATUSES,
  RESEND_BLOCKING_STATUSES,
  ReadBackKind,
  TerminalReason,
  VerificationMethodValue,
  DENIAL_LIMIT,
  canRetry,
  failureRefuted,
  verificationContradicted,
} from '@verity/status-model';
import { DataSource, EntityManager, EntityTarget, ObjectLiteral } from 'typeorm';
import { Approval, Criterion, EventEntity, ExecutionEntity, OperationEntity, TenantEntity } from './entities';
import {
  ConnectorSettingsRecord,
  ConnectorSettingsRow,
  connectorSettingsOfRow,
  settingsVersionOf,
} from './entities/connector-settings.entity';
import { SecretsCipher } from './secrets-cipher';
import { operationVersionOf } from './operation-version';
import { cutAtBytes, keptPage } from './page-bytes';
import { approvalPolicyOf } from './tenant-policy';
import { refutedRetriesOf, refutedUpTheChainLocked } from './retry-chain';
import { Queryable, isoInstant, rows, sqlLiterals, transaction } from './sql';
import { TransitionService } from './transition.service';

export interface NewOperation {
  id: string;
  key: string;
  position: number;
  connector: string;
  action: string;
  params: Record<string, unknown>;
  irreversible: boolean;
  requires_approval: boolean;
  verification_method: VerificationMethodValue;
  expected_state: Record<string, unknown> | null;
  depends_on: string[];
  approval: Approval | null;
  /**
   * The caller's own name for the effect at a provider that does not deduplicate (a connector's `resendReference`), or
   * null: insertExecution writes nothing while an operation of the tenant and connector naming it is sent and unsettled.
   */
  resend_ref?: string | null;
}

/**
 * An operation as insertExecution writes it: PREPARED at generation 0, never sent, read or decided (the columns'
 * defaults). The API answers a submission with these instead of reading them back.
 */
export function preparedOperation(
  op: NewOperation,
  execution: { id: string; tenantId: string },
  createdAt: Date,
): OperationEntity {
  return {
    id: op.id,
    executionId: execution.id,
    tenantId: execution.tenantId,
    key: op.key,
    generation: 0,
    position: op.position,
    connector: op.connector,
    action: op.action,
    params: op.params,
    irreversible: op.irreversible,
    requiresApproval: op.requires_approval,
    verificationMethod: op.verification_method,
    expectedState: op.expected_state,
    dependsOn: op.depends_on,
    resendRef: op.resend_ref ?? null,
    status: OperationStatus.PREPARED,
    terminalReason: null,
    attempt: 0,
    evidence: null,
    noChangeRequired: false,
    retryOf: null,
    approval: op.approval,
    obligation: null,
    observation: null,
    providerRef: null,
    checkCount: 0,
    sentAt: null,
    acknowledgedAt: null,
    rejectedAt: null,
    rejection: null,
    nextCheckAt: null,
    createdAt,
    updatedAt: createdAt,
  };
}

export interface NewExecution {
  id: string;
  tenantId: string;
  agentId: string;
  intent: string;
  deadlineSeconds: number;
  criteria: Criterion[];
  idempotencyKey: string | null;
  /**
   * With `idempotencyKey`: the request's hash and how long its record lives; an `in_flight` record older than
   * `abandonAfterMs` (left by an older version's request that never finished) may be taken over.
   */
  idempotency?: { requestHash: string; ttlMs: number; abandonAfterMs: number };
  operations: NewOperation[];
  createdEventId: string;
  /** The W3C traceparent of the request (null with traces off). */
  traceParent?: string | null;
  /**
   * The connectors whose amount caps the caller has not checked: the statement writes nothing when the tenant has one
   * on them (the answer is then `capped`). Omitted: checked.
   */
  uncheckedCapsOf?: string[];
  /**
   * The connectors whose tenant secrets the caller has not looked for in the submission: the statement writes nothing
   * when the tenant has a secret for one of them (the answer then lists `secrets`). Omitted: looked for.
   */
  uncheckedSecretsOf?: string[];
  /**
   * The API key that asked for the execution (a submission's, or a retry's): named as `by` on its `execution.created`
   * event, as a decision's event names its key, so the history says who asked for the effect. Omitted: the system's.
   */
  requestedBy?: string;
  /**
   * The API key that submits (of `tenantId`): the statement writes only while it is unrevoked, share-locking its row
   * (see INTAKE_SQL.insertExecution), and answers `revoked` otherwise. Omitted: no key is checked (the system's own
   * writes: a retry checks its key in its own transaction first).
   */
  submittedBy?: string;
}

/** How many earlier attempts an operation's chain of retries is walked back for (`retryChainsOf`). */
export const RETRY_CHAIN_DEPTH = 100;
/**
 * How many of them an operation shows (`earlier_attempts`), nearest first; further back, any of the chain's DENIAL_LIMIT
 * nearest denials (the operation's own included) is shown too, so no run of retries cancelled unsent keeps a reviewer
 * from the denials of the request.
 */
export const EARLIER_ATTEMPTS_SHOWN = 10;

export const INTAKE_SQL = {
  // $13: the connectors whose amount caps intake has not checked yet (null: checked). When the tenant has an amount cap
  // on one of them nothing is written and the one row says `capped`: the caller checks the amounts, then writes again.
  // $16 likewise for the connectors whose tenant secrets intake has not looked for in the submission (`secrets`).
  // An operation naming the resend_ref of one of the tenant's operations on its connector that was sent and is not
  // settled (blocksResend) is a blind re-send of it: nothing is written and the one row names that operation
  // (`unsettled_…`, the first new operation's in position order), once the caps and secrets are checked. Each new
  // operation's reference is probed on its own (LATERAL … LIMIT 1): as a join, the generic plan read every unsettled
  // operation of the tenant on every submission (the function's 100 estimated rows made a hash of them cheaper).
  // $17: the submitting key. Nothing is written once it is revoked, and the one row says `revoked`. FOR SHARE conflicts
  // with the revocation's UPDATE: a revocation not yet committed is waited for, and then (READ COMMITTED's re-check of
  // the row's newest version) refuses the submission; one that comes later waits for this statement's commit. FOR KEY
  // SHARE would cost the same and not conflict with that UPDATE (revoked_at is no key column), proving nothing.
  insertExecution: `WITH stands AS MATERIALIZED (
       SELECT $17::text IS NULL OR EXISTS (
         SELECT 1 FROM api_keys k WHERE k.id = $17 AND k.tenant_id = $2 AND k.revoked_at IS NULL FOR SHARE
       ) AS yes
     ), unsettled AS MATERIALIZED (
       SELECT o.id, o.execution_id, o.key, o.status, r.position
       FROM jsonb_to_recordset($8::jsonb) AS r(position int, connector text, resend_ref text)
       CROSS JOIN LATERAL (
         SELECT o.id, o.execution_id, o.key, o.status FROM operations o
         WHERE o.tenant_id = $2 AND o.connector = r.connector AND o.resend_ref = r.resend_ref AND o.resend_ref IS NOT NULL
           AND o.status IN (${sqlLiterals(RESEND_BLOCKING_STATUSES)}) AND o.attempt > 0
         ORDER BY o.id LIMIT 1
       ) o
       WHERE r.resend_ref IS NOT NULL
       ORDER BY r.position, o.id LIMIT 1
     ), capped AS (
       SELECT $13::text[] IS NOT NULL AND EXISTS (
         SELECT 1 FROM tenant_connector_settings s
         WHERE s.tenant_id = $2 AND s.connector = ANY($13::text[]) AND jsonb_path_exists(s.spending_caps, '$[*].max_amount')
       ) AS caps, $16::text[] IS NOT NULL AND EXISTS (
         SELECT 1 FROM tenant_connector_secrets x WHERE x.tenant_id = $2 AND x.connector = ANY($16::text[])
       ) AS secrets
     ), unchecked AS (
       SELECT caps, secrets, caps OR secrets AS yes FROM capped
     ), held AS (
       SELECT u.yes OR EXISTS (SELECT 1 FROM unsettled) OR NOT k.yes AS yes FROM unchecked u, stands k
     ), free AS MATERIALIZED (
       -- Another request with this key is writing right now: answer "in flight" instead of waiting for it.
       SELECT $7::text IS NULL OR pg_try_advisory_xact_lock(hashtextextended($2 || chr(31) || $7, 0)) AS yes
     ), claim AS (
       INSERT INTO idempotency_keys (tenant_id, route, key, request_hash, state, execution_id, expires_at)
       SELECT $2, 'executions', $7, $11, 'completed', $1, now() + make_interval(secs => GREATEST($14 / 1000.0, $5::double precision))
       WHERE $7::text IS NOT NULL AND NOT (SELECT yes FROM held) AND (SELECT yes FROM free)
       ON CONFLICT (tenant_id, route, key) DO UPDATE
         SET request_hash = EXCLUDED.request_hash, state = 'completed', execution_id = EXCLUDED.execution_id,
             created_at = now(), expires_at = EXCLUDED.expires_at, claim_token = NULL
         WHERE idempotency_keys.expires_at < now()
            OR (idempotency_keys.state = 'in_flight'
                AND idempotency_keys.created_at < now() - make_interval(secs => $15 / 1000.0))
       RETURNING key
     ), e AS (
       INSERT INTO executions (id, tenant_id, agent_id, intent, status, deadline_at, criteria, idempotency_key, event_seq,
                               trace_parent)
       SELECT $1::text, $2::text, $3::text, $4::text, 'created', now() + make_interval(secs => $5::double precision),
              $6::jsonb, $7::text, 1, $12::text
       WHERE NOT (SELECT yes FROM held) AND ($7::text IS NULL OR EXISTS (SELECT 1 FROM claim))
       RETURNING id, tenant_id, created_at, deadline_at, updated_at
     ), o AS (
       INSERT INTO operations (id, execution_id, tenant_id, key, position, connector, action, params, irreversible,
                               requires_approval, verification_method, expected_state, depends_on, approval, resend_ref,
                               status)
       SELECT r.id, e.id, e.tenant_id, r.key, r.position, r.connector, r.action, r.params, r.irreversible,
              r.requires_approval, r.verification_method, r.expected_state, r.depends_on, r.approval, r.resend_ref,
              'PREPARED'
       FROM e, jsonb_to_recordset($8::jsonb) AS r(id text, key text, position int, connector text, action text,
            params jsonb, irreversible boolean, requires_approval boolean, verification_method text,
            expected_state jsonb, depends_on text[], approval jsonb, resend_ref text)
       RETURNING id
     ), ev AS (
       INSERT INTO events (id, execution_id, tenant_id, seq, type, to_status, data)
       SELECT $9, e.id, e.tenant_id, 1, 'execution.created', 'created', $10 FROM e
     )
     SELECT e.created_at, e.deadline_at, e.updated_at, (SELECT count(*) FROM o) AS n, false AS capped,
            false AS secrets, false AS busy, NULL AS unsettled_id, NULL AS unsettled_execution_id,
            NULL AS unsettled_key, NULL AS unsettled_status, NULL::int AS unsettled_position, false AS revoked FROM e
     UNION ALL SELECT NULL, NULL, NULL, 0, u.caps, u.secrets, false, NULL, NULL, NULL, NULL, NULL, false
       FROM unchecked u, stands k WHERE u.yes AND k.yes
     UNION ALL SELECT NULL, NULL, NULL, 0, false, false, false, x.id, x.execution_id, x.key, x.status, x.position, false
       FROM unsettled x, unchecked u, stands k WHERE NOT u.yes AND k.yes
     UNION ALL SELECT NULL, NULL, NULL, 0, false, false, true, NULL, NULL, NULL, NULL, NULL, false
       FROM free, held WHERE NOT free.yes AND NOT held.yes
     UNION ALL SELECT NULL, NULL, NULL, 0, false, false, false, NULL, NULL, NULL, NULL, NULL, true
       FROM stands k WHERE NOT k.yes`,
  // A retry is a new operation that remembers what it retries (I5); the unique index allows one retry per original.
  // Written only while no FAILED up the chain it joins was contradicted: the send guard would cancel it (retry_refuted).
  // The chain judged as the send guard judges it (each link share-locked, read fresh): a refutation of a link being
  // written is waited for and seen (409 effect-exists), and a later one waits for the retry's commit. From the
  // statement's snapshot, a retry made as a refutation committed was answered 201 on a chain already refuted (and
  // cancelled at its send, retry_refuted).
  setRetryOf: `UPDATE operations SET retry_of = $2 WHERE id = $1 AND tenant_id = $3
     AND NOT ${refutedUpTheChainLocked('$2', '$3')} RETURNING id`,
  // Of the operations $2 (retries), those whose chain of retries holds a FAILED contradicted since (retry_refuted): each
  // link up the page's chains walked once, however many of the page's retries it lies behind (refutedRetriesOf).
  refutedRetries: refutedRetriesOf('$2::text[]', '$1'),
  // The executions of the retries made on the word of operation $1, or of one of its retries in turn (`retry_of`, followed
  // down), that are not sent yet (PREPARED: waiting on an approval, a dependency or a send): what a contradiction of
  // $1's FAILED leaves to cancel (retry_refuted). One probe of the unique index on retry_of per link.
  executionsOfWaitingRetries: `WITH RECURSIVE down AS (
       SELECT o.id, o.execution_id, o.status FROM operations o WHERE o.retry_of = $1 AND o.tenant_id = $2
       UNION
       SELECT o.id, o.execution_id, o.status FROM operations o JOIN down d ON o.retry_of = d.id AND o.tenant_id = $2)
     SELECT DISTINCT execution_id FROM down WHERE status = '${OperationStatus.PREPARED}' ORDER BY execution_id`,
  retryOf: `SELECT id, execution_id FROM operations WHERE retry_of = $1 AND tenant_id = $2`,
  // Each operation $2 (depth 0) and the earlier attempts of its chain of retries (`retry_of`, followed back, depth 1, 2,
  // …) shown (EARLIER_ATTEMPTS_SHOWN, and the nearest denied ones further back), with who denied each one denied (the
  // key on its approval), how many of the links walked (at most $3 back, the operation included) were denied, and
  // whether the chain goes on past them (`uncounted`: the last link walked is itself a retry). One probe of the primary
  // key per link; the walk carries no approval, and the links past those shown are counted here, not answered (a page
  // of long chains answers at most EARLIER_ATTEMPTS_SHOWN + 1 + DENIAL_LIMIT rows per operation), their approvals read
  // only for the rows answered.
  retryChains: `WITH RECURSIVE chain AS (
       SELECT r.id AS root, 0 AS depth, r.id, r.retry_of, r.execution_id, r.status, r.terminal_reason,
              coalesce(r.approval->>'state' = 'denied', false) AS denied
       FROM operations r WHERE r.tenant_id = $1 AND r.id = ANY($2::text[])
       UNION ALL
       SELECT c.root, c.depth + 1, o.id, o.retry_of, o.execution_id, o.status, o.terminal_reason,
              coalesce(o.approval->>'state' = 'denied', false)
       FROM chain c JOIN operations o ON o.id = c.retry_of AND o.tenant_id = $1
       WHERE c.depth < $3),
     counted AS (
       SELECT c.*, count(*) FILTER (WHERE c.denied) OVER (PARTITION BY c.root) AS denials,
              bool_or(c.depth = $3 AND c.retry_of IS NOT NULL) OVER (PARTITION BY c.root) AS uncounted,
              row_number() OVER (PARTITION BY c.root, c.denied ORDER BY c.depth) AS nth
       FROM chain c)
     SELECT c.root, c.depth, c.id, c.execution_id, c.status, c.terminal_reason, c.denied,
            a.approval->>'decided_by' AS decided_by, a.approval->>'decided_at' AS decided_at,
            a.approval->>'reason' AS reason, c.denials, c.uncounted
     FROM counted c LEFT JOIN operations a ON c.denied AND a.id = c.id AND a.tenant_id = $1
     WHERE c.depth <= ${EARLIER_ATTEMPTS_SHOWN} OR (c.denied AND c.nth <= ${DENIAL_LIMIT})
     ORDER BY c.root, c.depth`,
  // Another of the tenant's operations on the connector naming the resend_ref that was sent and is not settled
  // (blocksResend): the one a send of operation $4 would re-send (the send guard's reference_unsettled).
  unsettledResendOf: `SELECT o.id, o.execution_id, o.key, o.status FROM operations o
     WHERE o.tenant_id = $1 AND o.connector = $2 AND o.resend_ref = $3 AND o.resend_ref IS NOT NULL AND o.id <> $4
       AND o.status IN (${sqlLiterals(RESEND_BLOCKING_STATUSES)}) AND o.attempt > 0
     ORDER BY o.id LIMIT 1`,
  // The operation a retry is made from, locked for the retry's transaction: a re-check that records a read after it ended
  // (an annotation, which updates this row) waits for the retry to commit, so the retry is judged on every such read
  // committed before it, and any later one follows it in the history.
  // NO KEY UPDATE, as the annotation's own update: the key share a foreign key check takes (the retry's retry_of, a
  // worker's write of the retry operation) is not made to wait behind it.
  lockRetried: `SELECT status, acknowledged_at, provider_ref FROM operations WHERE id = $1 AND tenant_id = $2
     FOR NO KEY UPDATE`,
  // What reads of its source recorded after it ended FAILED (re-checks that raced the decision) found, oldest first.
  readsAfterFailed: `SELECT data->>'result' AS result, data->'evidence' AS evidence FROM events
     WHERE operation_id = $1 AND tenant_id = $2 AND type = 'operation.rechecked'
       AND data->>'after' = ${sqlLiterals([OperationStatus.FAILED])}
     ORDER BY seq`,
} as const;

/** A read of an operation's source recorded after it ended FAILED: its result and what it showed. */
export interface ReadAfterFailed {
  result: ReadBackKind;
  evidence: Record<string, unknown> | null;
}

/**
 * Locks the operation a retry is made from (in the retry's transaction, before anything is written) and reads, once
 * the lock is held, its status, the provider's acknowledgement if one is on file (a late 2xx is recorded on a FAILED
 * row too), and what reads of its source recorded after it ended FAILED found. Null when there is no such operation in
 * the tenant.
 */
export async function lockRetried(
  db: Queryable,
  tenantId: string,
  operationId: string,
): Promise<{
  status: OperationStatus;
  acknowledgedAt: Date | null;
  providerRef: Record<string, unknown> | null;
  readsAfterFailed: ReadAfterFailed[];
} | null> {
  const [locked] = await rows<{
    status: OperationStatus;
    acknowledged_at: Date | null;
    provider_ref: Record<string, unknown> | null;
  }>(db, INTAKE_SQL.lockRetried, [operationId, tenantId]);
  if (!locked) return null;
  // A statement of its own, after the lock: it sees what a re-check that held the row before it committed.
  const readsAfterFailed = await rows<ReadAfterFailed>(db, INTAKE_SQL.readsAfterFailed, [operationId, tenantId]);
  return {
    status: locked.status,
    acknowledgedAt: locked.acknowledged_at === null ? null : new Date(locked.acknowledged_at),
    providerRef: locked.provider_ref,
    readsAfterFailed,
  };
}

/**
 * I7: one statement writes the execution, its operations and its first event, so a 201 means all of it is
 * committed (and it costs one round trip, since commits are the scarce resource). I8: with an Idempotency-Key, the
 * same statement writes the key's record (completed, naming the execution; kept for the TTL, or until the execution's
 * deadline when that is later — a client repeating a submission while its execution can still act gets it back, never a
 * second one that would make the effects again), and writes anything only when it could:
 * null when another record holds the key (nothing written; `idempotencyHolder` says which); `busy` when another
 * request with the key is in this statement right now (a transaction-scoped advisory lock on tenant and key, taken
 * without waiting: it answers "in flight" rather than queueing behind it). The unique index stays what decides: of
 * any number of requests one writes. `unchecked` when the tenant has an amount cap on a connector of
 * `uncheckedCapsOf` (`caps`) or a secret for a connector of `uncheckedSecretsOf` (`secrets`): nothing written, the
 * key not taken; check what it names, then call again without it. `unsettled` (once nothing is unchecked) when an
 * operation names the `resend_ref` of one of the tenant's operations on the same connector that was sent and is not
 * settled (`blocksResend`): a blind re-send of it; nothing written, the key not taken. `revoked` when `submittedBy` was
 * revoked before the statement could write (a revocation under way is waited for): nothing written.
 */
export async function insertExecution(
  db: Queryable,
  input: NewExecution,
): Promise<
  | { createdAt: Date; deadlineAt: Date; updatedAt: Date }
  | { unchecked: { caps: boolean; secrets: boolean } }
  | { unsettled: UnsettledReference }
  | 'busy'
  | 'revoked'
  | null
> {
  if ((input.idempotencyKey === null) !== (input.idempotency === undefined)) {
    throw new Error('an Idempotency-Key, and only one, comes with its request hash and lifetimes');
  }
  const result = await rows<{
    created_at: Date;
    deadline_at: Date;
    updated_at: Date;
    capped: boolean;
    secrets: boolean;
    busy: boolean;
    unsettled_id: string | null;
    unsettled_execution_id: string;
    unsettled_key: string;
    unsettled_status: OperationStatus;
    unsettled_position: number;
    revoked: boolean;
  }>(db, INTAKE_SQL.insertExecution, [
    input.id,
    input.tenantId,
    input.agentId,
    input.intent,
    input.deadlineSeconds,
    JSON.stringify(input.criteria),
    input.idempotencyKey,
    JSON.stringify(input.operations),
    input.createdEventId,
    JSON.stringify({ operations: input.operations.length, ...(input.requestedBy && { by: input.requestedBy }) }),
    input.idempotency?.requestHash ?? null,
    input.traceParent ?? null,
    input.uncheckedCapsOf ?? null,
    input.idempotency?.ttlMs ?? null,
    input.idempotency?.abandonAfterMs ?? null,
    input.uncheckedSecretsOf ?? null,
    input.submittedBy ?? null,
  ]);
  if (result.length === 0) return null;
  if (result[0].revoked) return 'revoked';
  if (result[0].capped || result[0].secrets)
    return { unchecked: { caps: result[0].capped, secrets: result[0].secrets } };
  if (result[0].unsettled_id !== null) {
    const held = result[0];
    return {
      unsettled: {
        operationId: held.unsettled_id!,
        executionId: held.unsettled_execution_id,
        key: held.unsettled_key,
        status: held.unsettled_status,
        position: held.unsettled_position,
      },
    };
  }
  if (result[0].busy) return 'busy';
  return { createdAt: result[0].created_at, deadlineAt: result[0].deadline_at, updatedAt: result[0].updated_at };
}

/**
 * The operation a new one would blindly re-send (insertExecution's `unsettled`): it names the same resend_ref on the same
 * connector of the tenant, was sent, and is not settled. `position` is the new operation's (the first in order).
 */
export interface UnsettledReference {
  operationId: string;
  executionId: string;
  key: string;
  status: OperationStatus;
  position: number;
}

/** The retry made of an operation (same tenant), or null: one at most (unique index). */
export async function findRetryOf(
  db: Queryable,
  tenantId: string,
  operationId: string,
): Promise<{ operationId: string; executionId: string } | null> {
  const [found] = await rows<{ id: string; execution_id: string }>(db, INTAKE_SQL.retryOf, [operationId, tenantId]);
  return found ? { operationId: found.id, executionId: found.execution_id } : null;
}

/**
 * The operation a send of `op` would blindly re-send, read now: another of its tenant's operations on its connector
 * naming its `resend_ref`, sent and not settled (the send guard's `reference_unsettled`). Null when there is none (any
 * more) or `op` names no reference. `position` is `op`'s.
 */
export async function findUnsettledResend(
  db: Queryable,
  op: { id: string; tenantId: string; connector: string; resendRef: string | null; position: number },
): Promise<UnsettledReference | null> {
  if (op.resendRef === null) return null;
  const [found] = await rows<{ id: string; execution_id: string; key: string; status: OperationStatus }>(
    db,
    INTAKE_SQL.unsettledResendOf,
    [op.tenantId, op.connector, op.resendRef, op.id],
  );
  return found
    ? {
        operationId: found.id,
        executionId: found.execution_id,
        key: found.key,
        status: found.status,
        position: op.position,
      }
    : null;
}

/**
 * Marks a new operation as the retry of `retryOf` (same tenant), in the statement that checks the chain it joins: false,
 * and nothing written, where `retryOf` or one up its chain of retries is a FAILED contradicted since (a retry made on
 * its word would be cancelled at send, `retry_refuted`). The caller rolls the retry back then.
 */
export async function setRetryOf(
  db: Queryable,
  tenantId: string,
  operationId: string,
  retryOf: string,
): Promise<boolean> {
  return (await rows(db, INTAKE_SQL.setRetryOf, [operationId, retryOf, tenantId])).length === 1;
}

/**
 * Of `ops`, the retries that a retry of would be allowed by their status (FAILED, CANCELLED) but whose chain of retries
 * holds a FAILED contradicted since (`refutedRetries`): the retry intake refuses a retry of them (409 effect-exists), so
 * they show `retry: "forbidden"`. No statement where `ops` holds no such retry.
 */
export function retriesRefuted(
  db: Queryable,
  tenantId: string,
  ops: readonly { id: string; status: OperationStatus; retryOf: string | null }[],
): Promise<Set<string>> {
  return refutedRetries(
    db,
    tenantId,
    ops.filter((op) => op.retryOf !== null && canRetry(op.status)).map((op) => op.id),
  );
}

/** An earlier attempt of an operation's request: one up its chain of retries, and how it ended. */
export interface EarlierAttempt {
  operationId: string;
  executionId: string;
  status: OperationStatus;
  terminalReason: TerminalReason | null;
  /** Where a reviewer denied its approval: the key that did (as its approval records it), when, and the reason given. */
  denial: { by: string | null; at: string | null; reason: string | null } | null;
}

/** An operation's chain of retries: its earlier attempts shown (nearest first) and the denials of the whole walk. */
export interface RetryChain {
  earlier: EarlierAttempt[];
  /** Denials in the chain, the operation's own included, over the last RETRY_CHAIN_DEPTH links. */
  denials: number;
  /** The chain goes on past those RETRY_CHAIN_DEPTH links: the denials of its earliest links were not counted. */
  uncounted: boolean;
}

/**
 * Of `ops`, those that are retries or were denied: their chains of retries (`RetryChain`), walked back at most
 * RETRY_CHAIN_DEPTH links, the last EARLIER_ATTEMPTS_SHOWN shown. Others are absent (no earlier attempt, no denial). One
 * statement for a page; none where no operation of `ops` is a retry or denied.
 */
export async function retryChainsOf(
  db: Queryable,
  tenantId: string,
  ops: readonly { id: string; retryOf: string | null; approval: Approval | null }[],
): Promise<Map<string, RetryChain>> {
  const asked = ops.filter((op) => op.retryOf !== null || op.approval?.state === 'denied').map((op) => op.id);
  const chains = new Map<string, RetryChain>();
  if (asked.length === 0) return chains;
  const found = await rows<{
    root: string;
    depth: number;
    id: string;
    execution_id: string;
    status: OperationStatus;
    terminal_reason: TerminalReason | null;
    denied: boolean | null;
    decided_by: string | null;
    decided_at: string | null;
    reason: string | null;
    denials: string | number;
    uncounted: boolean;
  }>(db, INTAKE_SQL.retryChains, [tenantId, asked, RETRY_CHAIN_DEPTH]);
  for (const row of found) {
    const chain = chains.get(row.root) ?? { earlier: [], denials: Number(row.denials), uncounted: row.uncounted };
    chains.set(row.root, chain);
    if (row.depth === 0) continue; // the operation itself: its denial is counted, it is no earlier attempt
    chain.earlier.push({
      operationId: row.id,
      executionId: row.execution_id,
      status: row.status,
      terminalReason: row.terminal_reason,
      denial: row.denied ? { by: row.decided_by, at: row.decided_at, reason: row.reason } : null,
    });
  }
  return chains;
}

/**
 * The executions holding a retry not sent yet (PREPARED) made on the word of `operationId` or of one of its retries in
 * turn: where a contradiction of its FAILED (a late 2xx, a read that showed the effect) leaves a retry to cancel
 * (`retry_refuted`). The writer of the contradiction advances them, so they are cancelled at once, not when their send
 * is next tried.
 */
export async function executionsOfWaitingRetries(
  db: Queryable,
  tenantId: string,
  operationId: string,
): Promise<string[]> {
  const found = await rows<{ execution_id: string }>(db, INTAKE_SQL.executionsOfWaitingRetries, [
    operationId,
    tenantId,
  ]);
  return found.map((row) => row.execution_id);
}

/**
 * Of `operationIds`, those that are retries whose chain of retries holds a FAILED contradicted since (the send guard's
 * `retry_refuted`): never sent, whoever releases them. One statement for a page.
 */
export async function refutedRetries(
  db: Queryable,
  tenantId: string,
  operationIds: readonly string[],
): Promise<Set<string>> {
  if (operationIds.length === 0) return new Set();
  const found = await rows<{ id: string }>(db, INTAKE_SQL.refutedRetries, [tenantId, [...operationIds]]);
  return new Set(found.map((row) => row.id));
}

/**
 * Reads of whole rows on the hot paths skip TypeORM's query builder (a quarter of the dispatcher's CPU went there):
 * one prepared SELECT of every mapped column, turned into the entity by TypeORM's own per-column hydration, so
 * column types and transformers apply exactly as they do for `find`. A statement names the columns it reads as
 * `{columns:<Entity> <alias>[ <prefix>]}`, expanded once per statement from the entity's mapping.
 *
 * Tenant in the signature: every read reachable from the API takes the tenant and matches it in the statement (I9).
 * The workers, which act on ids the system handed them across every tenant, use the `…ForWorker` variants.
 */
const SETTINGS_VERSION = settingsVersionOf('s');
const TENANT_APPROVAL_POLICY = approvalPolicyOf('t');

const EXECUTION_BY_ID = `SELECT {columns:Execution t} FROM executions t WHERE t.id = $1 AND t.tenant_id = $2`;
const OPERATION_BY_ID = `SELECT {columns:Operation t} FROM operations t WHERE t.id = $1 AND t.tenant_id = $2`;

/** The text an execution (`e`) and its operations are stored as (uncompressed): what reading and answering them costs. */
const EXECUTION_TEXT_BYTES = `(octet_length(e::text) + coalesce((SELECT sum(octet_length(o::text)) FROM operations o
                                       WHERE o.execution_id = e.id AND o.tenant_id = e.tenant_id), 0))::float8`;

/**
 * `read` (a statement of one tenant's rows: its id is the parameter $`tenant`), and in the same statement whether that
 * tenant holds any secret for the connectors $`connectors` (every connector that takes them; `holds_secrets`): what an
 * answer of those rows is redacted with, told on the way by an index probe (the primary key of tenant_connector_secrets
 * begins with tenant_id). Always one row at least — when `read` finds nothing, one with its columns null, so a 404 or
 * an empty page is told too (readWithSecretsHeld). `orderBy`: the order of `read`'s rows, kept (a lateral subquery's
 * order is not promised by itself).
 */
export function withSecretsHeld(read: string, tenant: number, connectors: number, orderBy?: string): string {
  return `SELECT r.*, h.holds_secrets
     FROM (SELECT EXISTS (SELECT 1 FROM tenant_connector_secrets x
                           WHERE x.tenant_id = $${tenant} AND x.connector = ANY($${connectors}::text[])) AS holds_secrets) h
     LEFT JOIN LATERAL (${read}) r ON true${orderBy ? ` ORDER BY ${orderBy}` : ''}`;
}

export const READ_SQL = {
  databaseNow: `SELECT clock_timestamp() AS now`,
  executionById: EXECUTION_BY_ID,
  // The same, and whether the tenant holds any secret for the connectors that take them ($3): what an answer of the
  // execution is redacted with, told on the way — a 404 too (withSecretsHeld).
  executionByIdWithSecretsHeld: withSecretsHeld(EXECUTION_BY_ID, 2, 3),
  // The same, and the stored text it holds with its operations (`answer_bytes`, uncompressed): what answering it
  // costs, known before its operations are read (the API's answer budget).
  executionWithBytesByIdWithSecretsHeld: withSecretsHeld(
    `SELECT {columns:Execution e}, ${EXECUTION_TEXT_BYTES} AS answer_bytes FROM executions e
     WHERE e.id = $1 AND e.tenant_id = $2`,
    2,
    3,
  ),
  executionByIdForWorker: `SELECT {columns:Execution t} FROM executions t WHERE t.id = $1`,
  executionWithOperations: `SELECT {columns:Execution e e__}, {columns:Operation o o__}, clock_timestamp() AS database_now
     FROM executions e LEFT JOIN operations o ON o.execution_id = e.id
     WHERE e.id = $1 AND e.tenant_id = $2 ORDER BY o.position, o.generation`,
  // Each operation row with the tenant's settings for its connector (what a context read runs with); the sealed secrets
  // only for a connector that declares it uses them ($2).
  executionWithOperationsForWorker: `SELECT {columns:Execution e e__}, {columns:Operation o o__}, {columns:Tenant t t__},
            clock_timestamp() AS database_now,
            ${TENANT_APPROVAL_POLICY} AS t__approval_policy, s.allow_hosts AS s__allow_hosts, s.spending_caps AS s__spending_caps,
            s.read_back_binding AS s__read_back_binding, ${SETTINGS_VERSION} AS s__version,
            CASE WHEN o.connector = ANY($2::text[]) THEN (SELECT jsonb_object_agg(x.name, x.value)
              FROM tenant_connector_secrets x WHERE x.tenant_id = o.tenant_id AND x.connector = o.connector) END AS s__secrets
     FROM executions e LEFT JOIN operations o ON o.execution_id = e.id LEFT JOIN tenants t ON t.id = e.tenant_id
     LEFT JOIN tenant_connector_settings s ON s.tenant_id = o.tenant_id AND s.connector = o.connector
     WHERE e.id = $1 ORDER BY o.position, o.generation`,
  // With the tenant's settings for the operation's connector (one round trip per send); the sealed secrets only for a
  // connector that declares it uses them ($2).
  operationToSendForWorker: `SELECT {columns:Operation o o__}, e.status AS e__status, e.deadline_at AS e__deadline_at,
            clock_timestamp() AS database_now,
            {columns:Tenant t t__}, ${TENANT_APPROVAL_POLICY} AS t__approval_policy, s.allow_hosts AS s__allow_hosts,
            s.spending_caps AS s__spending_caps, s.read_back_binding AS s__read_back_binding, ${SETTINGS_VERSION} AS s__version,
            CASE WHEN o.connector = ANY($2::text[]) THEN (SELECT jsonb_object_agg(x.name, x.value)
              FROM tenant_connector_secrets x WHERE x.tenant_id = o.tenant_id AND x.connector = o.connector) END AS s__secrets
     FROM operations o JOIN executions e ON e.id = o.execution_id LEFT JOIN tenants t ON t.id = o.tenant_id
     LEFT JOIN tenant_connector_settings s ON s.tenant_id = o.tenant_id AND s.connector = o.connector
     WHERE o.id = $1`,
  operationsOfExecution: `SELECT {columns:Operation t} FROM operations t
     WHERE t.execution_id = $1 AND t.tenant_id = $2 ORDER BY t.position, t.generation`,
  operationsOfExecutionForWorker: `SELECT {columns:Operation t} FROM operations t
     WHERE t.execution_id = $1 ORDER BY t.position, t.generation`,
  operationById: OPERATION_BY_ID,
  // The same, and whether the tenant holds any secret ($3; withSecretsHeld): the read an answer of the operation begins with.
  operationByIdWithSecretsHeld: withSecretsHeld(OPERATION_BY_ID, 2, 3),
  // The row and its version (operationVersionOf) from one read: the ETag answered names exactly what is shown; and
  // whether the tenant holds any secret ($3; withSecretsHeld) — what the answer is redacted with.
  operationWithVersionById: withSecretsHeld(
    `SELECT {columns:Operation t}, ${operationVersionOf('t')} AS version
     FROM operations t WHERE t.id = $1 AND t.tenant_id = $2`,
    2,
    3,
  ),
  // Share-locked while still at one of the versions $3 (any, given null) and at none of $4 (until the transaction
  // ends): no change of it commits meanwhile. With $5, only while it is still held for a reviewer (a status a re-check
  // is owed in) and no resolution is recorded on it: judged on the row as locked, so a decision committed after the
  // caller read the hold, or while this waited for the row, is seen.
  lockOperationAtVersion: `SELECT t.id FROM operations t
     WHERE t.id = $1 AND t.tenant_id = $2
       AND ($3::text[] IS NULL OR ${operationVersionOf('t', undefined, 'locked')} = ANY($3::text[]))
       AND ($4::text[] IS NULL OR NOT ${operationVersionOf('t', undefined, 'locked')} = ANY($4::text[]))
       AND (NOT $5::boolean
            OR (t.status IN (${sqlLiterals(RECHECK_OWED_STATUSES)}) AND t.obligation->'resolution' IS NULL)) FOR SHARE`,
  // The version the operation had just before each "still unknown" recorded on its hold (`investigation`: its index),
  // other things being as they are now: a "still unknown" changes only the obligation's due time (it keeps the one
  // before as `previous_due_at`), its investigations and what the version leaves out. Before the first one the list
  // was absent or empty: both are answered.
  operationVersionsBeforeInvestigations: `SELECT g.i AS investigation,
            ${operationVersionOf('t', 'g.obligation')} AS version
     FROM operations t,
          LATERAL (SELECT i, CASE WHEN absent THEN t.obligation - 'investigations'
                    ELSE t.obligation || jsonb_build_object('investigations',
                      (SELECT coalesce(jsonb_agg(a.x ORDER BY a.n), '[]'::jsonb)
                         FROM jsonb_array_elements(t.obligation->'investigations') WITH ORDINALITY AS a(x, n)
                        WHERE a.n <= i)) END
                    || jsonb_build_object('due_at', t.obligation->'investigations'->i->'previous_due_at') AS obligation
             FROM generate_series(0, jsonb_array_length(t.obligation->'investigations') - 1) AS i,
                  (VALUES (false), (true)) AS b(absent)
            WHERE NOT absent OR i = 0) AS g
     WHERE t.id = $1 AND t.tenant_id = $2 AND jsonb_typeof(t.obligation->'investigations') = 'array'`,
  operationByIdForWorker: `SELECT {columns:Operation t} FROM operations t WHERE t.id = $1`,
  operationWithClockForWorker: `SELECT {columns:Operation t}, clock_timestamp() AS database_now FROM operations t WHERE t.id = $1`,
  operationsOfExecutions: `SELECT {columns:Operation t} FROM operations t
     WHERE t.execution_id = ANY($1) AND t.tenant_id = $2 ORDER BY t.position, t.generation`,
  // Newest first by id (ids are time-ordered); one statement per filter combination, so each keeps its own plan. Each
  // tells whether the tenant holds any secret (the parameter after the filters; withSecretsHeld): what the page is
  // redacted with. A page holds at most $2 - 1 executions, and fewer once their stored text with their operations'
  // (uncompressed) would pass the last parameter (cutAtBytes): read, sized and cut in one statement, the executions
  // sized after the limit (found through the tenant's indexes, newest first).
  listExecutions: withSecretsHeld(
    cutAtBytes(
      `SELECT {columns:Execution e}, ${EXECUTION_TEXT_BYTES} AS page_row_bytes FROM executions e
     WHERE e.tenant_id = $1 ORDER BY e.id DESC LIMIT $2`,
      'id DESC',
      2,
      4,
    ),
    1,
    3,
    'r.id DESC',
  ),
  listExecutionsByStatus: withSecretsHeld(
    cutAtBytes(
      `SELECT {columns:Execution e}, ${EXECUTION_TEXT_BYTES} AS page_row_bytes FROM executions e
     WHERE e.tenant_id = $1 AND e.status = $3 ORDER BY e.id DESC LIMIT $2`,
      'id DESC',
      2,
      5,
    ),
    1,
    4,
    'r.id DESC',
  ),
  listExecutionsBefore: withSecretsHeld(
    cutAtBytes(
      `SELECT {columns:Execution e}, ${EXECUTION_TEXT_BYTES} AS page_row_bytes FROM executions e
     WHERE e.tenant_id = $1 AND e.id < $3 ORDER BY e.id DESC LIMIT $2`,
      'id DESC',
      2,
      5,
    ),
    1,
    4,
    'r.id DESC',
  ),
  listExecutionsByStatusBefore: withSecretsHeld(
    cutAtBytes(
      `SELECT {columns:Execution e}, ${EXECUTION_TEXT_BYTES} AS page_row_bytes FROM executions e
     WHERE e.tenant_id = $1 AND e.status = $3 AND e.id < $4 ORDER BY e.id DESC LIMIT $2`,
      'id DESC',
      2,
      6,
    ),
    1,
    5,
    'r.id DESC',
  ),
  // The order every transition statement takes the locks in: the operations, then the execution.
  lockOperations: `SELECT {columns:Operation t} FROM operations t WHERE t.execution_id = $1 ORDER BY t.id FOR UPDATE`,
  lockExecution: `SELECT status FROM executions WHERE id = $1 AND tenant_id = $2 FOR UPDATE`,
  lockExecutionForWorker: `SELECT status FROM executions WHERE id = $1 FOR UPDATE`,
  tenantById: `SELECT {columns:Tenant t} FROM tenants t WHERE t.id = $1`,
  listEvents: `SELECT {columns:Event t} FROM events t
     WHERE t.execution_id = $1 AND t.tenant_id = $4 AND t.seq > $2 ORDER BY t.seq LIMIT $3`,
  // A page of the events after a seq ($2), at most $3 - 1 of them and fewer once their stored text (uncompressed) would
  // pass $5 (cutAtBytes): read, sized and cut in one statement. Sized after the limit, by the (execution_id, seq) index.
  eventsWithinBytes: cutAtBytes(
    `SELECT {columns:Event t}, octet_length(t::text)::float8 AS page_row_bytes FROM events t
     WHERE t.execution_id = $1 AND t.tenant_id = $4 AND t.seq > $2 ORDER BY t.seq LIMIT $3`,
    'seq',
    3,
    5,
  ),
  eventSeq: `SELECT seq FROM events WHERE id = $1 AND execution_id = $2 AND tenant_id = $3`,
  // Whether a write that named its event id in advance was committed (its acknowledgement may have been lost).
  eventOfOperationForWorker: `SELECT 1 FROM events WHERE id = $1 AND operation_id = $2`,
  lastStatusChanges: `SELECT DISTINCT ON (operation_id) operation_id, id, from_status, to_status, data->>'cause' AS cause,
            data->>'refusal' AS refusal, data->>'actor' AS actor, created_at
     FROM events WHERE operation_id = ANY($1) AND tenant_id = $2 AND type = 'operation.status_changed'
     ORDER BY operation_id, seq DESC`,
  executionMove: `SELECT data->>'by' AS by, created_at FROM events
     WHERE execution_id = $1 AND tenant_id = $2 AND type = 'execution.status_changed' AND to_status = $3
     ORDER BY seq DESC LIMIT 1`,
  lastApprovalDecision: `SELECT ev.data->>'decision' AS decision, ev.data->>'by' AS by, ev.created_at,
            x.deadline_at <= clock_timestamp() AS deadline_passed
     FROM events ev JOIN executions x ON x.id = ev.execution_id AND x.tenant_id = ev.tenant_id
     WHERE ev.operation_id = $1 AND ev.tenant_id = $2 AND ev.type = 'approval.decided'
     ORDER BY ev.seq DESC LIMIT 1`,
  // The first decision made on or after the request shown (its `requested_at`, as the API shows one): a request is
  // asked for again only after a grant of the one before, so that is the decision on it — not a later request's.
  // Compared as the API shows both times (to the millisecond), so the decision is never before the request it answers;
  // as text (that form orders as time does), because a request shown may be an instant no timestamp holds (year 0).
  approvalDecisionOnRequest: `SELECT ev.data->>'decision' AS decision, ev.data->>'by' AS by, ev.created_at
     FROM events ev
     WHERE ev.operation_id = $1 AND ev.tenant_id = $2 AND ev.type = 'approval.decided'
       AND ${isoInstant('ev.created_at')} >= $3::text
     ORDER BY ev.seq LIMIT 1`,
  lastStatusChangesForWorker: `SELECT DISTINCT ON (operation_id) operation_id, id, from_status, to_status, data->>'cause' AS cause,
            data->>'refusal' AS refusal, data->>'actor' AS actor, created_at
     FROM events WHERE operation_id = ANY($1) AND type = 'operation.status_changed'
     ORDER BY operation_id, seq DESC`,
  // What contradicts a final status, recorded after it (the operation's row says so: contradictionsOnRecord): the
  // provider's late 2xx or a re-check's read that showed the effect after FAILED, its late rejection after VERIFIED.
  lastContradictionsForWorker: `SELECT DISTINCT ON (operation_id) operation_id, id FROM events
     WHERE operation_id = ANY($1)
       AND ((type IN ('operation.rechecked', 'operation.acknowledged_late') AND data->>'after' = 'FAILED')
         OR (type = 'operation.rejected_late' AND data->>'after' = 'VERIFIED'))
     ORDER BY operation_id, seq DESC`,
} as const;

const ENTITIES: Record<string, EntityTarget<ObjectLiteral>> = {
  Execution: ExecutionEntity,
  Operation: OperationEntity,
  Tenant: TenantEntity,
  Event: EventEntity,
};

const expanded = new Map<string, string>();

/** A statement with its `{columns:…}` placeholders replaced by the entities' mapped columns (cached per statement). */
export function withColumns(db: EntityManager, sql: string): string {
  let text = expanded.get(sql);
  if (!text) {
    text = sql.replace(/\{columns:(\w+) (\w+)(?: (\w+))?\}/g, (_, entity: string, alias: string, prefix?: string) =>
      columnsOf(db, ENTITIES[entity], alias, prefix ?? ''),
    );
    expanded.set(sql, text);
  }
  return text;
}

/** Every mapped column of an entity as `alias."column"`, or `alias."column" AS "<prefix>column"` for joins. */
function columnsOf(db: EntityManager, target: EntityTarget<ObjectLiteral>, alias: string, prefix = ''): string {
  const metadata = db.connection.getMetadata(target);
  return metadata.columns
    .map((c) => `${alias}."${c.databaseName}"${prefix ? ` AS "${prefix}${c.databaseName}"` : ''}`)
    .join(', ');
}

/** One raw row (as read by a `{columns:…}` statement) as the entity, through TypeORM's own hydration. */
export function hydrate<T extends ObjectLiteral>(
  db: EntityManager,
  target: EntityTarget<T>,
  raw: Record<string, unknown>,
  prefix = '',
): T {
  const metadata = db.connection.getMetadata(target);
  const entity = metadata.create() as T;
  for (const column of metadata.columns) {
    const value = raw[`${prefix}${column.databaseName}`];
    column.setEntityValue(entity, db.connection.driver.prepareHydratedValue(value, column));
  }
  return entity;
}

/** Runs a `{columns:…}` statement of one entity (alias without prefix) and hydrates its rows. */
export async function selectEntities<T extends ObjectLiteral>(
  db: EntityManager,
  target: EntityTarget<T>,
  sql: string,
  params: unknown[],
): Promise<T[]> {
  const found = await rows<Record<string, unknown>>(db, withColumns(db, sql), params);
  return found.map((raw) => hydrate(db, target, raw));
}

async function first<T extends ObjectLiteral>(
  db: EntityManager,
  target: EntityTarget<T>,
  sql: string,
  params: unknown[],
): Promise<T | null> {
  const [found] = await selectEntities(db, target, sql, params);
  return found ?? null;
}

export function findExecution(db: EntityManager, id: string, tenantId: string): Promise<ExecutionEntity | null> {
  return first(db, ExecutionEntity, READ_SQL.executionById, [id, tenantId]);
}

/** What a read found, and whether the tenant holds any secret for the connectors that take them (withSecretsHeld). */
export interface SecretsHeld<T> {
  found: T;
  holdsSecrets: boolean;
}

/**
 * Runs a `{columns:…}` statement built by withSecretsHeld: its rows (the one whose columns are all null, left out) and
 * whether the tenant holds any secret, as of the same snapshot. Told "none" only when the probe answered so.
 */
export async function readWithSecretsHeld(
  db: EntityManager,
  sql: string,
  params: unknown[],
): Promise<SecretsHeld<Record<string, unknown>[]>> {
  const found = await rows<Record<string, unknown>>(db, withColumns(db, sql), params);
  return {
    found: found.filter((raw) => raw.id !== null && raw.id !== undefined),
    holdsSecrets: found[0]?.holds_secrets !== false,
  };
}

/** readWithSecretsHeld of a one-row read: its row through `map` (null: none found), and whether the tenant holds any secret. */
async function firstWithSecretsHeld<T>(
  db: EntityManager,
  sql: string,
  params: unknown[],
  map: (row: Record<string, unknown>) => T,
): Promise<SecretsHeld<T | null>> {
  const { found, holdsSecrets } = await readWithSecretsHeld(db, sql, params);
  const [row] = found;
  return { found: row ? map(row) : null, holdsSecrets };
}

/**
 * The execution (as findExecution; null: no such execution of the tenant), and whether its tenant holds any secret for
 * `secretConnectors` (every connector that takes them), as of the same snapshot — told when it finds none too.
 */
export function findExecutionWithSecretsHeld(
  db: EntityManager,
  id: string,
  tenantId: string,
  secretConnectors: readonly string[],
): Promise<SecretsHeld<ExecutionEntity | null>> {
  return firstWithSecretsHeld(db, READ_SQL.executionByIdWithSecretsHeld, [id, tenantId, secretConnectors], (row) =>
    hydrate(db, ExecutionEntity, row),
  );
}

/**
 * As findExecutionWithSecretsHeld, and the stored text the execution holds with its operations (`bytes`: what its
 * answer will read and present), from the same statement.
 */
export async function findExecutionWithBytesWithSecretsHeld(
  db: EntityManager,
  id: string,
  tenantId: string,
  secretConnectors: readonly string[],
): Promise<SecretsHeld<{ execution: ExecutionEntity; bytes: number } | null>> {
  return firstWithSecretsHeld(
    db,
    READ_SQL.executionWithBytesByIdWithSecretsHeld,
    [id, tenantId, secretConnectors],
    ({ answer_bytes, ...row }) => ({ execution: hydrate(db, ExecutionEntity, row), bytes: Number(answer_bytes) }),
  );
}

export function findExecutionForWorker(db: EntityManager, id: string): Promise<ExecutionEntity | null> {
  return first(db, ExecutionEntity, READ_SQL.executionByIdForWorker, [id]);
}

/**
 * An execution and its operations (position order) in one round trip, with the database's clock at that read: the
 * clock their times (`deadline_at`, a resolution's `at`) are on, for a caller that judges whether they have passed.
 */
export async function findExecutionWithOperations(
  db: EntityManager,
  id: string,
  tenantId: string,
): Promise<{ execution: ExecutionEntity; operations: OperationEntity[]; databaseNow: Date } | null> {
  const found = await rows<Record<string, unknown>>(db, withColumns(db, READ_SQL.executionWithOperations), [
    id,
    tenantId,
  ]);
  if (found.length === 0) return null;
  return {
    execution: hydrate(db, ExecutionEntity, found[0], 'e__'),
    operations: found.filter((raw) => raw.o__id !== null).map((raw) => hydrate(db, OperationEntity, raw, 'o__')),
    databaseNow: new Date(found[0].database_now as string | Date),
  };
}

/**
 * The same for the lifecycle, with the execution's tenant (its approval policy and settings): what every advance of an
 * execution reads, in one round trip.
 */
export async function findExecutionWithOperationsForWorker(
  db: EntityManager,
  id: string,
  secrets: ConnectorSecretsAccess,
): Promise<{
  execution: ExecutionEntity;
  operations: OperationEntity[];
  tenant: TenantEntity | null;
  /** The tenant's approval policy as stored (`approvalPolicyOf`), for the send guard. */
  approvalPolicy: string | null;
  /**
   * The tenant's settings for each connector its operations use, by connector name; secrets that do not open with
   * this SECRETS_KEY are said in `secretsUnopened`, not thrown.
   */
  settings: Map<string, ConnectorSettingsRecord>;
  /** The database's clock at this read: the clock `deadline_at` is on (and the send guard and the sweeper judge it by). */
  databaseNow: Date;
} | null> {
  const found = await rows<Record<string, unknown>>(db, withColumns(db, READ_SQL.executionWithOperationsForWorker), [
    id,
    secrets.connectors,
  ]);
  if (found.length === 0) return null;
  const operations: OperationEntity[] = [];
  const settings = new Map<string, ConnectorSettingsRecord>();
  for (const raw of found) {
    if (raw.o__id === null) continue;
    const operation = hydrate(db, OperationEntity, raw, 'o__');
    operations.push(operation);
    // A secret that does not open is said in the settings, not thrown: this read serves the whole advance, and the
    // context reads it feeds are failed reads then (the lifecycle's), not a job that throws on every retry.
    if (!settings.has(operation.connector))
      settings.set(operation.connector, settingsOfJoinedRow(operation, raw, secrets, 'recorded'));
  }
  return {
    execution: hydrate(db, ExecutionEntity, found[0], 'e__'),
    operations,
    tenant: found[0].t__id === null ? null : hydrate(db, TenantEntity, found[0], 't__'),
    approvalPolicy: found[0].t__approval_policy as string | null,
    settings,
    databaseNow: new Date(found[0].database_now as string | Date),
  };
}

/** The settings an `s__`-prefixed join read for an operation's connector, the secrets opened when it declares them. */
function settingsOfJoinedRow(
  operation: OperationEntity,
  raw: Record<string, unknown>,
  secrets: ConnectorSecretsAccess,
  unopened: 'thrown' | 'recorded' = 'thrown',
): ConnectorSettingsRecord {
  const row: ConnectorSettingsRow = {
    allow_hosts: raw.s__allow_hosts as ConnectorSettingsRow['allow_hosts'],
    spending_caps: raw.s__spending_caps as ConnectorSettingsRow['spending_caps'],
    read_back_binding: raw.s__read_back_binding as ConnectorSettingsRow['read_back_binding'],
    secrets: raw.s__secrets as ConnectorSettingsRow['secrets'],
    version: raw.s__version as string | null,
  };
  const opens = secrets.connectors.includes(operation.connector) && secrets.cipher;
  return connectorSettingsOfRow(row, operation.tenantId, operation.connector, opens, { unopened });
}

/** What a send starts from (see `findOperationToSend`), or what a job that already read it hands to the sender. */
export interface OperationToSend {
  operation: OperationEntity;
  executionDeadline: Date;
  tenant: TenantEntity | null;
  /** The tenant's approval policy as stored when `tenant` was read (`approvalPolicyOf`), for the send guard. */
  approvalPolicy: string | null;
  settings: ConnectorSettingsRecord;
  /**
   * How far the database's clock is ahead of this process' (negative: behind), measured at the read. A grant's
   * `expires_at` and the execution's deadline are times on the database's clock (the SENT statement compares them
   * there), so the sender judges them there too: a host whose clock runs ahead would take a grant the database still
   * holds valid for expired.
   */
  clockOffsetMs: number;
}

/**
 * An operation as a send needs it: the row, its execution's status and deadline, its tenant, and the tenant's settings
 * for its connector read in the same statement, with the secrets opened when the connector declares them.
 */
export async function findOperationToSend(
  db: EntityManager,
  id: string,
  secrets: ConnectorSecretsAccess,
): Promise<OperationToSend | null> {
  const [found] = await rows<Record<string, unknown>>(db, withColumns(db, READ_SQL.operationToSendForWorker), [
    id,
    secrets.connectors,
  ]);
  if (!found) return null;
  const operation = hydrate(db, OperationEntity, found, 'o__');
  return {
    operation,
    executionDeadline: new Date(found.e__deadline_at as string | Date),
    tenant: found.t__id === null ? null : hydrate(db, TenantEntity, found, 't__'),
    approvalPolicy: found.t__approval_policy as string | null,
    settings: settingsOfJoinedRow(operation, found, secrets),
    clockOffsetMs: new Date(found.database_now as string | Date).getTime() - Date.now(),
  };
}

/** Which connectors' secrets a joined settings read opens (those that declare they use them), and the key to open them. */
export interface ConnectorSecretsAccess {
  connectors: string[];
  cipher: SecretsCipher;
}

export function findOperations(db: EntityManager, executionId: string, tenantId: string): Promise<OperationEntity[]> {
  return selectEntities(db, OperationEntity, READ_SQL.operationsOfExecution, [executionId, tenantId]);
}

export function findOperationsForWorker(db: EntityManager, executionId: string): Promise<OperationEntity[]> {
  return selectEntities(db, OperationEntity, READ_SQL.operationsOfExecutionForWorker, [executionId]);
}

export function findOperation(db: EntityManager, id: string, tenantId: string): Promise<OperationEntity | null> {
  return first(db, OperationEntity, READ_SQL.operationById, [id, tenantId]);
}

/** The operation (as findOperation), and whether its tenant holds any secret for `secretConnectors` (withSecretsHeld). */
export function findOperationWithSecretsHeld(
  db: EntityManager,
  id: string,
  tenantId: string,
  secretConnectors: readonly string[],
): Promise<SecretsHeld<OperationEntity | null>> {
  return firstWithSecretsHeld(db, READ_SQL.operationByIdWithSecretsHeld, [id, tenantId, secretConnectors], (row) =>
    hydrate(db, OperationEntity, row),
  );
}

/**
 * The operation and its version (the ETag a decision's If-Match names; operationVersionOf), read together; and whether
 * its tenant holds any secret for `secretConnectors` (every connector that takes them; withSecretsHeld), as of the
 * same snapshot — told when it finds no such operation too.
 */
export function findOperationWithVersionAndSecretsHeld(
  db: EntityManager,
  id: string,
  tenantId: string,
  secretConnectors: readonly string[],
): Promise<SecretsHeld<{ operation: OperationEntity; version: string } | null>> {
  return firstWithSecretsHeld(db, READ_SQL.operationWithVersionById, [id, tenantId, secretConnectors], (row) => ({
    operation: hydrate(db, OperationEntity, row),
    version: row.version as string,
  }));
}

/** The operation and its version (the ETag a decision's If-Match names; operationVersionOf), read together. */
export async function findOperationWithVersion(
  db: EntityManager,
  id: string,
  tenantId: string,
): Promise<{ operation: OperationEntity; version: string } | null> {
  return (await findOperationWithVersionAndSecretsHeld(db, id, tenantId, [])).found;
}

/**
 * Whether the operation is still at one of `versions` (If-Match; undefined: any) and at none of `notVersions`
 * (If-None-Match), share-locked if so until the transaction ends: what the transaction does next (a re-check asked for)
 * is done only for a version the request allows, and no change of the operation commits before it is done. With
 * `whileHeld`, also only while it is held for a reviewer with no resolution recorded (what a re-check is asked for):
 * a read of the hold before the transaction is no guard, a decision may commit between.
 */
export async function lockOperationAtVersion(
  tx: Queryable,
  tenantId: string,
  id: string,
  versions: readonly string[] | undefined,
  notVersions?: readonly string[],
  whileHeld = false,
): Promise<boolean> {
  const found = await rows<{ id: string }>(tx, READ_SQL.lockOperationAtVersion, [
    id,
    tenantId,
    versions ?? null,
    notVersions ?? null,
    whileHeld,
  ]);
  return found.length > 0;
}

/**
 * The versions the operation had just before each "still unknown" recorded on its hold, each with the index of the
 * investigation made on it (operationVersionsBeforeInvestigations): a decision whose If-Match names one of them was
 * made on the version another reviewer's "still unknown" was made on first.
 */
export async function findVersionsBeforeInvestigations(
  db: Queryable,
  id: string,
  tenantId: string,
): Promise<{ investigation: number; version: string }[]> {
  const found = await rows<{ investigation: number; version: string }>(
    db,
    READ_SQL.operationVersionsBeforeInvestigations,
    [id, tenantId],
  );
  return found.map((r) => ({ investigation: Number(r.investigation), version: r.version }));
}

export function findOperationForWorker(db: EntityManager, id: string): Promise<OperationEntity | null> {
  return first(db, OperationEntity, READ_SQL.operationByIdForWorker, [id]);
}

/**
 * The operation and how far the database's clock is ahead of this process' (negative: behind), measured at the read.
 * Its times (`sent_at`, `acknowledged_at`, `updated_at`) are on the database's clock: how long ago they were is measured
 * there, not by a host whose clock may be off.
 */
export async function findOperationWithClockForWorker(
  db: EntityManager,
  id: string,
): Promise<{ operation: OperationEntity; clockOffsetMs: number } | null> {
  const [found] = await rows<Record<string, unknown>>(db, withColumns(db, READ_SQL.operationWithClockForWorker), [id]);
  if (!found) return null;
  return {
    operation: hydrate(db, OperationEntity, found),
    clockOffsetMs: new Date(found.database_now as string | Date).getTime() - Date.now(),
  };
}

/**
 * How far the database's clock is ahead of this process' (negative: behind), for a time written from this process
 * that the database, the sweeper or a person will compare with the database's clock (an obligation's due time).
 */
export async function databaseClockOffsetMs(db: Queryable): Promise<number> {
  return (await databaseNow(db)).getTime() - Date.now();
}

/**
 * The database's clock now: what a time the database stamped or compares (`deadline_at`) is judged against by a caller
 * that cannot put the comparison in its statement (a page of many executions, read once).
 */
export async function databaseNow(db: Queryable): Promise<Date> {
  const [found] = await rows<{ now: string | Date }>(db, READ_SQL.databaseNow);
  return new Date(found.now);
}

/**
 * A page of the tenant's executions, newest first: at most `limit`, and fewer once their stored text with their
 * operations' would pass `maxBytes` (one at least; none given: no such cut). `more`: another page follows. And whether
 * the tenant holds any secret for `secretConnectors` (every connector that takes them; withSecretsHeld), as of the
 * same snapshot — told of an empty page too. One statement.
 */
export async function listExecutionsWithSecretsHeld(
  db: EntityManager,
  tenantId: string,
  options: { status?: ExecutionStatus; before?: string; limit: number; maxBytes?: number },
  secretConnectors: readonly string[],
): Promise<SecretsHeld<ExecutionEntity[]> & { more: boolean; bytes: number }> {
  const sql = options.status
    ? options.before
      ? READ_SQL.listExecutionsByStatusBefore
      : READ_SQL.listExecutionsByStatus
    : options.before
      ? READ_SQL.listExecutionsBefore
      : READ_SQL.listExecutions;
  const params: unknown[] = [tenantId, options.limit + 1];
  if (options.status) params.push(options.status);
  if (options.before) params.push(options.before);
  params.push(secretConnectors, options.maxBytes ?? Infinity);
  const { found, holdsSecrets } = await readWithSecretsHeld(db, sql, params);
  const { rows: kept, more, bytes } = keptPage<Record<string, unknown>>(found);
  return { found: kept.map((raw) => hydrate(db, ExecutionEntity, raw)), holdsSecrets, more, bytes };
}

/** A page of the tenant's executions, newest first. */
export async function listExecutions(
  db: EntityManager,
  tenantId: string,
  options: { status?: ExecutionStatus; before?: string; limit: number },
): Promise<ExecutionEntity[]> {
  return (await listExecutionsWithSecretsHeld(db, tenantId, options, [])).found;
}

/**
 * Locks an execution's rows for the rest of the transaction, in the order every transition statement takes them
 * (its operations, then the execution), so a racing writer waits and then loses its compare-and-set instead of
 * deadlocking. Returns the rows as locked (operations in position order), or null when there is no such execution.
 */
async function lockRows(
  tx: EntityManager,
  executionId: string,
  tenantId: string | null,
): Promise<{ status: ExecutionStatus; operations: OperationEntity[] } | null> {
  const operations = await selectEntities(tx, OperationEntity, READ_SQL.lockOperations, [executionId]);
  const [execution] =
    tenantId === null
      ? await rows<{ status: ExecutionStatus }>(tx, READ_SQL.lockExecutionForWorker, [executionId])
      : await rows<{ status: ExecutionStatus }>(tx, READ_SQL.lockExecution, [executionId, tenantId]);
  if (!execution) return null;
  operations.sort((a, b) => a.position - b.position || a.generation - b.generation);
  return { status: execution.status, operations };
}

export function lockExecution(tx: EntityManager, executionId: string, tenantId: string) {
  return lockRows(tx, executionId, tenantId);
}

export function lockExecutionForWorker(tx: EntityManager, executionId: string) {
  return lockRows(tx, executionId, null);
}

export function findTenant(db: EntityManager, id: string): Promise<TenantEntity | null> {
  return first(db, TenantEntity, READ_SQL.tenantById, [id]);
}

export async function findOperationsOf(
  db: EntityManager,
  executionIds: string[],
  tenantId: string,
): Promise<OperationEntity[]> {
  if (executionIds.length === 0) return [];
  return selectEntities(db, OperationEntity, READ_SQL.operationsOfExecutions, [executionIds, tenantId]);
}

export function listEvents(
  db: EntityManager,
  executionId: string,
  tenantId: string,
  afterSeq: number,
  limit: number,
): Promise<EventEntity[]> {
  return selectEntities(db, EventEntity, READ_SQL.listEvents, [executionId, afterSeq, limit, tenantId]);
}

/**
 * The events after `afterSeq`, in order: at most `limit`, and fewer once their stored text would pass `maxBytes` (one
 * at least). Read, sized and cut by one statement (cutAtBytes): only the page's events are sent. `more`: later events
 * follow.
 */
export async function listEventsWithinBytes(
  db: EntityManager,
  executionId: string,
  tenantId: string,
  afterSeq: number,
  limit: number,
  maxBytes: number,
): Promise<{ events: EventEntity[]; more: boolean }> {
  const found = await rows<Record<string, unknown>>(db, withColumns(db, READ_SQL.eventsWithinBytes), [
    executionId,
    afterSeq,
    limit + 1,
    tenantId,
    maxBytes,
  ]);
  const { rows: kept, more } = keptPage<Record<string, unknown>>(found);
  return { events: kept.map((raw) => hydrate(db, EventEntity, raw)), more };
}

export async function eventSeqOf(
  db: EntityManager,
  executionId: string,
  tenantId: string,
  eventId: string,
): Promise<number | null> {
  const [found] = await rows<{ seq: string | number }>(db, READ_SQL.eventSeq, [eventId, executionId, tenantId]);
  return found ? Number(found.seq) : null;
}

/**
 * Whether the operation's event with this id was committed: a writer that named the id in advance (`eventId` of a
 * transition) asks it after a statement whose answer it never got (the connection was lost, or timed out, after the
 * commit), when its retry's compare-and-set then lost — to the first try, or to another writer.
 */
export async function eventRecordedForWorker(db: Queryable, operationId: string, eventId: string): Promise<boolean> {
  const found = await rows<{ '?column?': number }>(db, READ_SQL.eventOfOperationForWorker, [eventId, operationId]);
  return found.length > 0;
}

export function snapshotOf(op: OperationEntity): {
  id: string;
  status: OperationStatus;
  attempt: number;
  verificationMethod: VerificationMethodValue;
  terminalReason: TerminalReason | null;
  acknowledged: boolean;
  rejected: boolean;
} {
  return {
    id: op.id,
    status: op.status,
    attempt: op.attempt,
    verificationMethod: op.verificationMethod,
    terminalReason: op.terminalReason,
    acknowledged: op.acknowledgedAt !== null,
    rejected: Boolean(op.rejectedAt),
  };
}

/**
 * What was recorded on the row since its final status that contradicts it (the status model's rules): a FAILED the
 * provider's late 2xx or a later read of the source refutes (not "rejected, retry safe"), a VERIFIED the provider's
 * late rejection contradicts (not "committed"). Either way its commit is unknown.
 */
export function contradictionsOnRecord(op: OperationEntity): {
  failureRefuted: boolean;
  verificationContradicted: boolean;
} {
  return {
    failureRefuted: failureRefuted({
      status: op.status,
      acknowledged: op.acknowledgedAt !== null,
      effectShownAfter: Boolean(op.obligation?.effect_shown_after_failed),
    }),
    verificationContradicted: verificationContradicted({ status: op.status, rejected: Boolean(op.rejectedAt) }),
  };
}

/** Whether anything recorded since contradicts the operation's final status (contradictionsOnRecord). */
export function contradictedOnRecord(op: OperationEntity): boolean {
  const { failureRefuted: refuted, verificationContradicted: contradicted } = contradictionsOnRecord(op);
  return refuted || contradicted;
}

/** What a connector sees of an operation: its identity and request, never the whole row. */
export function connectorOperation(op: OperationEntity) {
  return {
    id: op.id,
    tenantId: op.tenantId,
    action: op.action,
    params: op.params,
    expectedState: op.expectedState,
    providerRef: op.providerRef,
  };
}

/** The move that brought an operation to its current status (its `operation.status_changed` event). */
export interface StatusChangeRecord extends LastStatusChange {
  eventId: string;
  /** The status it moved the operation to: not the operation's status as read before it, if it moved since. */
  to: OperationStatus;
}

async function lastStatusChanges(
  db: EntityManager,
  sql: string,
  params: unknown[],
): Promise<Map<string, StatusChangeRecord>> {
  const found = await rows<{
    operation_id: string;
    id: string;
    from_status: OperationStatus | null;
    to_status: OperationStatus;
    cause: string | null;
    refusal: string | null;
    actor: string | null;
    created_at: Date;
  }>(db, sql, params);
  return new Map(
    found.map((r) => [
      r.operation_id,
      {
        eventId: r.id,
        from: r.from_status,
        to: r.to_status,
        cause: r.cause,
        refusal: r.refusal,
        actor: r.actor,
        at: new Date(r.created_at),
      },
    ]),
  );
}

/**
 * For each operation, the last status-change event: its from-status, the cause and actor it recorded and when. The
 * operation's failure and its criteria's evidence are derived from it, so they always agree with the log.
 */
export async function findLastStatusChanges(
  db: EntityManager,
  operationIds: string[],
  tenantId: string,
): Promise<Map<string, StatusChangeRecord>> {
  if (operationIds.length === 0) return new Map();
  return lastStatusChanges(db, READ_SQL.lastStatusChanges, [operationIds, tenantId]);
}

/**
 * Who moved the execution into `to` and when (its last `execution.status_changed` event there): a cancel names the key
 * that made it (`by`); a move the system made has none.
 */
export async function findExecutionMove(
  db: Queryable,
  executionId: string,
  tenantId: string,
  to: ExecutionStatus,
): Promise<{ by: string | null; at: Date } | null> {
  const [found] = await rows<{ by: string | null; created_at: Date }>(db, READ_SQL.executionMove, [
    executionId,
    tenantId,
    to,
  ]);
  return found ? { by: found.by, at: new Date(found.created_at) } : null;
}

/**
 * The operation's last approval decision (its `approval.decided` event): what was decided, by which key and when, and
 * whether its execution's deadline has passed by the database's clock (the one the approval statement and the send
 * guard judge it by); null when none was ever written. A decision that lost its compare-and-set names it as the winner
 * when the operation no longer shows it (the dispatcher withdrew the grant as stale and asked again since).
 */
export async function findLastApprovalDecision(
  db: Queryable,
  operationId: string,
  tenantId: string,
): Promise<{ decision: string | null; by: string | null; at: Date; deadlinePassed: boolean } | null> {
  const [found] = await rows<{
    decision: string | null;
    by: string | null;
    created_at: Date;
    deadline_passed: boolean;
  }>(db, READ_SQL.lastApprovalDecision, [operationId, tenantId]);
  return found
    ? {
        decision: found.decision,
        by: found.by,
        at: new Date(found.created_at),
        deadlinePassed: found.deadline_passed,
      }
    : null;
}

/** An instant as the API shows one (`Date#toISOString` of a year 0000–9999, the form isoInstant writes). */
const SHOWN_INSTANT = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/**
 * The approval decision that answered the request shown to a reviewer (its `requested_at`), or null when no decision
 * was made on or after it (a request never on record, or the one still waiting). A decision naming a request that was
 * granted, withdrawn and asked for again (perhaps more than once since) lost to this one: it is the winner to name.
 */
export async function findApprovalDecisionOnRequest(
  db: Queryable,
  operationId: string,
  tenantId: string,
  requestedAt: string,
): Promise<{ decision: string | null; by: string | null; at: Date } | null> {
  // Only the form the API shows a request in orders as its text does; another (a year past 9999, `+010000-…`) was
  // never shown for a request on record, so nothing was decided on it.
  if (!SHOWN_INSTANT.test(requestedAt)) return null;
  const [found] = await rows<{ decision: string | null; by: string | null; created_at: Date }>(
    db,
    READ_SQL.approvalDecisionOnRequest,
    [operationId, tenantId, requestedAt],
  );
  return found ? { decision: found.decision, by: found.by, at: new Date(found.created_at) } : null;
}

export async function findLastStatusChangesForWorker(
  db: EntityManager,
  operationIds: string[],
): Promise<Map<string, StatusChangeRecord>> {
  if (operationIds.length === 0) return new Map();
  return lastStatusChanges(db, READ_SQL.lastStatusChangesForWorker, [operationIds]);
}

/**
 * For each operation whose final status was contradicted since (`contradictedOnRecord`), the id of the last event that
 * recorded the contradiction: the evidence of a verdict that fails because of it.
 */
export async function findLastContradictionsForWorker(
  db: EntityManager,
  operationIds: string[],
): Promise<Map<string, string>> {
  if (operationIds.length === 0) return new Map();
  const found = await rows<{ operation_id: string; id: string }>(db, READ_SQL.lastContradictionsForWorker, [
    operationIds,
  ]);
  return new Map(found.map((r) => [r.operation_id, r.id]));
}

/** The event that says a send was not made because the tenant's connector secrets do not open (once per operation). */
export const SEND_SECRETS_UNOPENED_EVENT = 'send.secrets_unopened';

export const SEND_NOTE_SQL = {
  /** The operation's row, locked: concurrent tries of the same send take their turn before looking for the event. */
  lockOperation: `SELECT execution_id FROM operations WHERE id = $1 FOR UPDATE`,
};

/** The one writer of events, for the notes below (it keeps no state of its own). */
const sendNotes = new TransitionService();

/**
 * Records, once per operation, that its send could not be built because the tenant's connector secrets do not open
 * with this SECRETS_KEY: `errorClass` only (the class name; never a message or a secret). Every try of the send fails
 * the same way until the key is fixed, so later tries record nothing: the event is written only while none of its type
 * exists (the annotation's oncePerOperation), and the operation's row lock taken first in the same transaction makes
 * concurrent tries see each other's. True when this call wrote it.
 */
export async function recordSendSecretsUnopened(
  dataSource: DataSource,
  operationId: string,
  errorClass: string,
): Promise<boolean> {
  return transaction(dataSource, async (tx) => {
    const [operation] = await rows<{ execution_id: string }>(tx, SEND_NOTE_SQL.lockOperation, [operationId]);
    if (!operation) return false;
    const written = await sendNotes.annotate(tx, {
      executionId: operation.execution_id,
      operationId,
      oncePerOperation: true,
      type: SEND_SECRETS_UNOPENED_EVENT,
      data: { error: errorClass, sent: false },
    });
    return written.won;
  });
}
