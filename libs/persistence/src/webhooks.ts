import { randomBytes } from 'node:crypto';
import { newId } from '@verity/platform';
import {
  Commit,
  OperationStatus,
  TerminalReason,
  VerificationMethodValue,
  WebhookDeliveryStatus,
  WebhookEventType,
  commitOf,
  everSent,
  failureRefuted,
  verificationContradicted,
  webhookEventFor,
  webhookAttemptSkippedByDisable,
  webhookOwedTo,
  webhookSkippedByDisable,
} from '@verity/status-model';
import type { DataSource } from 'typeorm';
import { ADMIN_CHANGE_INSERT_COLUMNS } from './admin-changes';
import { requireActiveKey } from './api-keys';
import { IDEMPOTENCY_SQL } from './idempotency';
import { cutAtBytes, keptPage } from './page-bytes';
import { SecretUnreadableError, SecretsCipher, secretBinding } from './secrets-cipher';
import { Queryable, firstRow, rows, transaction, withinTransaction } from './sql';

/**
 * Webhook endpoints, their delivery log and the outbox that fills it. Every statement of the aggregate is here.
 *
 * The outbox is the events table itself: a scan takes the candidate events (a partial index, see the migration) of
 * transactions older than the oldest one still running, in (txid, id) order from a cursor, and writes one delivery
 * row per subscribed endpoint in the same transaction that advances the cursor. Postgres holds every delivery owed;
 * BullMQ jobs only trigger the sends.
 */

/**
 * The events webhookEventFor may announce. Each arm is identical to the predicate of one partial index, or the planner
 * would not use it: events_webhook_outbox (1764510000000-webhooks.ts) and events_webhook_after_failed
 * (1764550000000-webhook-after-failed.ts, last made by 1764660000000-webhook-late-rejection.ts); Postgres reads the two
 * with one bitmap OR (webhooks.spec checks the plan).
 */
export const WEBHOOK_CANDIDATES_SQL = `((e.type IN ('obligation.escalated', 'outcome.evaluated')
        OR (e.type = 'operation.status_changed' AND e.to_status IN ('VERIFIED', 'FAILED', 'CANCELLED', 'ACKNOWLEDGED', 'MANUAL_REVIEW'))
        OR (e.type = 'execution.status_changed' AND e.to_status IN ('completed', 'failed', 'cancelled', 'expired')))
        OR ((e.type IN ('operation.rechecked', 'operation.acknowledged_late') AND e.data->>'after' = 'FAILED')
          OR (e.type = 'operation.rejected_late' AND e.data->>'after' = 'VERIFIED')))`;

const ENDPOINT_COLUMNS = `id, tenant_id, url, events, disabled_at, disabled_reason, consecutive_failures, created_by,
  created_at, updated_at`;

/** The endpoint columns, each named by the table's alias (for a statement that reads the table twice). */
const endpointColumnsOf = (alias: string) =>
  ENDPOINT_COLUMNS.split(',')
    .map((column) => `${alias}.${column.trim()}`)
    .join(', ');

/**
 * An endpoint (`alias`, a row of webhook_endpoints) as the history of admin changes records it: what the admin API
 * shows of its configuration. Built from named columns, so the signing secret (`secret`) can never be in it.
 */
const endpointSnapshotOf = (alias: string) =>
  `jsonb_build_object('id', ${alias}.id, 'url', ${alias}.url, 'events', to_jsonb(${alias}.events),
       'disabled', ${alias}.disabled_at IS NOT NULL, 'disabled_reason', ${alias}.disabled_reason)`;

const DELIVERY_COLUMNS = `id, endpoint_id, event_id, type, payload, status, round, attempts, last_attempt_at,
  last_response_status, last_error, delivered_at, created_at`;

/** Every statement of the webhook aggregate (endpoints, the delivery log, the outbox cursor). */
export const WEBHOOKS_SQL = {
  // Creates of one tenant's endpoints take turns (a transaction-scoped lock on the tenant), so the count the INSERT
  // checks, read in the statement after the lock, includes every endpoint a create before it committed.
  lockTenantEndpoints: `SELECT pg_advisory_xact_lock(hashtextextended('webhook_endpoints' || chr(31) || $1, 0))`,
  // The history row ($8 its id, $6 who) is written by the same statement: only when the endpoint is.
  // With an Idempotency-Key ($9, the request's hash $10, kept $11 ms) the same statement takes the key's record (a new
  // one, or one that expired) naming the endpoint, and writes the endpoint only when it did: a crash cannot leave one
  // without the other, and a key another record holds writes nothing (the caller asks webhookKeyHolder why).
  createEndpoint: `WITH room AS (
       SELECT (SELECT count(*) FROM webhook_endpoints WHERE tenant_id = $2) < $7 AS yes
     ), claim AS (
       INSERT INTO idempotency_keys (tenant_id, route, key, request_hash, state, webhook_endpoint_id, expires_at)
       SELECT $2, 'webhooks', $9, $10, 'completed', $1, now() + make_interval(secs => $11 / 1000.0)
       WHERE $9::text IS NOT NULL AND (SELECT yes FROM room)
       ON CONFLICT (tenant_id, route, key) DO UPDATE
         SET request_hash = EXCLUDED.request_hash, state = 'completed', execution_id = NULL,
             webhook_endpoint_id = EXCLUDED.webhook_endpoint_id, created_at = now(), expires_at = EXCLUDED.expires_at,
             claim_token = NULL
         WHERE idempotency_keys.expires_at < now()
       RETURNING key
     ), created AS (
       INSERT INTO webhook_endpoints (id, tenant_id, url, events, secret, created_by)
       SELECT $1, $2, $3, $4, $5, $6
       WHERE (SELECT yes FROM room) AND ($9::text IS NULL OR EXISTS (SELECT 1 FROM claim))
       RETURNING ${ENDPOINT_COLUMNS}
     ), recorded AS (
       INSERT INTO admin_changes (${ADMIN_CHANGE_INSERT_COLUMNS})
       SELECT $8, $2, 'webhook_endpoint', NULL, $6, NULL, ${endpointSnapshotOf('created')} FROM created
     )
     SELECT ${ENDPOINT_COLUMNS} FROM created`,
  listEndpoints: `SELECT ${ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE tenant_id = $1 ORDER BY created_at, id`,
  findEndpoint: `SELECT ${ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2`,
  // Only to replay the answer that created it (the secret is shown to the request that made it, and its retries).
  endpointSecret: `SELECT secret FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2`,
  // The history row ($3 its id, $4 who) is written by the same statement, only when it deleted the endpoint: of two
  // deletes at once, the second waits for the first and then finds nothing (no row).
  // The endpoint's deliveries are locked before the endpoint, in the order the delivery worker locks them (the
  // delivery it records, then its endpoint's failure count): taking the endpoint first and its deliveries by cascade,
  // a delete deadlocked with a worker recording an attempt, and the admin got a 500.
  lockEndpointDeliveries: `SELECT 1 FROM webhook_deliveries WHERE endpoint_id = $2 AND tenant_id = $1 ORDER BY id FOR UPDATE`,
  deleteEndpoint: `WITH deleted AS (
       DELETE FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2 RETURNING ${ENDPOINT_COLUMNS}
     ), recorded AS (
       INSERT INTO admin_changes (${ADMIN_CHANGE_INSERT_COLUMNS})
       SELECT $3, $1, 'webhook_endpoint', NULL, $4, ${endpointSnapshotOf('deleted')}, NULL FROM deleted
     )
     SELECT id FROM deleted`,
  // As the policy's change: the row is locked first (lockEndpoint, in the same transaction), so `before` ($5) is the
  // version this statement changes, also when the delivery worker disabled it while this waited. History row: $3 its
  // id, $4 who.
  lockEndpoint: `SELECT ${endpointSnapshotOf('w')}::text AS before FROM webhook_endpoints w
     WHERE w.tenant_id = $1 AND w.id = $2 FOR NO KEY UPDATE`,
  enableEndpoint: `WITH changed AS (
       UPDATE webhook_endpoints w
       SET disabled_at = NULL, disabled_reason = NULL, consecutive_failures = 0, updated_at = now(),
           last_disabled_at = coalesce(w.disabled_at, w.last_disabled_at),
           reenabled_at = CASE WHEN w.disabled_at IS NOT NULL THEN now() ELSE w.reenabled_at END
       WHERE w.tenant_id = $1 AND w.id = $2
       RETURNING ${endpointColumnsOf('w')}, ${endpointSnapshotOf('w')} AS after
     ), recorded AS (
       INSERT INTO admin_changes (${ADMIN_CHANGE_INSERT_COLUMNS})
       SELECT $3, $1, 'webhook_endpoint', NULL, $4, $5::jsonb, after FROM changed
     )
     SELECT ${ENDPOINT_COLUMNS} FROM changed`,
  listDeliveries: `SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries
     WHERE tenant_id = $1 AND endpoint_id = $2 AND ($3::text IS NULL OR id < $3)
     ORDER BY id DESC LIMIT $4`,
  // The same page, at most $4 - 1 deliveries and fewer once their stored text (their payload and last error) would pass
  // $5 (cutAtBytes): read, sized and cut in one statement, the deliveries sized after the limit.
  deliveriesPage: cutAtBytes(
    `SELECT ${DELIVERY_COLUMNS},
            (octet_length(payload::text) + octet_length(coalesce(last_error, '')))::float8 AS page_row_bytes
     FROM webhook_deliveries
     WHERE tenant_id = $1 AND endpoint_id = $2 AND ($3::text IS NULL OR id < $3)
     ORDER BY id DESC LIMIT $4`,
    'id DESC',
    4,
    5,
  ),
  // Only a settled delivery (compare-and-set on its status): while a round is pending it may be in flight, and a new
  // round would send the message again beside it. Of several redeliveries at once, one moves it; the others find it
  // pending (the row lock makes them wait for the first, then re-read it) and change nothing.
  // Only while the admin's key ($4, of the tenant) stands, share-locked as a decision's statement locks it: a revocation
  // not yet committed is waited for and then refuses the redelivery, and one made later waits for it to commit.
  // `backlog`: its place behind the tenant's other redeliveries still waiting (read before this one is pending).
  redeliver: `UPDATE webhook_deliveries d SET status = 'pending', round = d.round + 1, updated_at = clock_timestamp()
     WHERE d.id = $3 AND d.endpoint_id = $2 AND d.tenant_id = $1 AND d.status <> 'pending'
       AND EXISTS (SELECT 1 FROM webhook_endpoints w WHERE w.id = d.endpoint_id AND w.disabled_at IS NULL)
       AND EXISTS (SELECT 1 FROM api_keys k WHERE k.id = $4 AND k.tenant_id = $1 AND k.revoked_at IS NULL FOR SHARE)
     RETURNING ${DELIVERY_COLUMNS},
       1 + (SELECT count(*)::int FROM webhook_deliveries p
            WHERE p.tenant_id = $1 AND p.status = 'pending' AND p.round > 0) AS backlog`,
  // Why a redelivery changed nothing: the tenant's endpoint (no row: none visible), the delivery under it as it stands
  // (status NULL: none), whether the endpoint is disabled, and whether the key that asked still stands.
  redeliveryRefusal: `SELECT d.status, d.round, w.disabled_at IS NOT NULL AS disabled,
       EXISTS (SELECT 1 FROM api_keys k WHERE k.id = $4 AND k.tenant_id = $3 AND k.revoked_at IS NULL) AS key_stands
     FROM webhook_endpoints w
     LEFT JOIN webhook_deliveries d ON d.endpoint_id = w.id AND d.id = $1 AND d.tenant_id = w.tenant_id
     WHERE w.id = $2 AND w.tenant_id = $3`,
  skipDelivery: `UPDATE webhook_deliveries SET status = 'skipped', last_error = $3, updated_at = clock_timestamp()
     WHERE id = $1 AND round = $2 AND status = 'pending'`,
  lockCursor: `SELECT last_txid::text, last_event_id FROM webhook_outbox_cursor WHERE id = 1 FOR UPDATE SKIP LOCKED`,
  // Every transaction older than the oldest one still running has committed or rolled back: its events are final.
  // A younger one's events wait for a later pass, so an event committed late is never jumped over.
  candidateEvents: `SELECT e.id, e.txid::text, e.tenant_id, e.execution_id, e.operation_id, e.type, e.from_status, e.to_status,
              e.data, e.seq, e.created_at, x.agent_id, o.key AS operation_key, o.connector, o.action,
              o.verification_method
       FROM events e
       JOIN executions x ON x.id = e.execution_id
       LEFT JOIN operations o ON o.id = e.operation_id
       WHERE ${WEBHOOK_CANDIDATES_SQL}
         AND (e.txid, e.id) > ($1::xid8, $2::text)
         AND e.txid < pg_snapshot_xmin(pg_current_snapshot())
       ORDER BY e.txid, e.id
       LIMIT $3`,
  // The operations of the executions a pass announces as finished (one read for the batch), in the order GET shows
  // them, with what their commit is derived from (as contradictionsOnRecord reads it from the row).
  finishedOperations: `SELECT o.execution_id, o.id, o.key, o.status, o.attempt, o.terminal_reason,
              o.acknowledged_at IS NOT NULL AS acknowledged, o.rejected_at IS NOT NULL AS rejected,
              coalesce(jsonb_typeof(o.obligation->'effect_shown_after_failed') = 'object', false) AS effect_shown_after
       FROM operations o WHERE o.execution_id = ANY($1::text[])
       ORDER BY o.execution_id, o.position, o.generation`,
  // FOR KEY SHARE: an endpoint deleted meanwhile waits until its deliveries are written (and then takes them with it),
  // instead of failing the insert on the foreign key and with it the whole pass. Disabled ones too: an event that
  // happened before the disable is still owed to it, and recorded (webhookOwedTo, libs/status-model).
  // With when it was created and its last disabled time (webhookOwedTo): an event the pass reaches late is owed only
  // to an endpoint that was enabled when it happened.
  subscribedEndpoints: `SELECT id, tenant_id, events, created_at, disabled_at, last_disabled_at, reenabled_at
       FROM webhook_endpoints
       WHERE tenant_id = ANY($1::text[]) FOR KEY SHARE`,
  advanceCursor: `UPDATE webhook_outbox_cursor SET last_txid = $1::xid8, last_event_id = $2, updated_at = now() WHERE id = 1`,
  // A delivery with a reason ($7) is written skipped: its endpoint was disabled after the event (webhookSkippedByDisable).
  insertDeliveries: `INSERT INTO webhook_deliveries (id, endpoint_id, tenant_id, event_id, type, payload, status, last_error)
     SELECT id, endpoint_id, tenant_id, event_id, type, payload,
            CASE WHEN skipped IS NULL THEN 'pending' ELSE 'skipped' END, skipped
       FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $7::text[])
            AS d (id, endpoint_id, tenant_id, event_id, type, payload, skipped)
     ON CONFLICT (endpoint_id, event_id) DO NOTHING
     RETURNING id, round, tenant_id, status`,
  // How many deliveries each tenant has waiting, these included (the same transaction inserted them).
  pendingByTenant: `SELECT tenant_id, count(*)::int AS n FROM webhook_deliveries
     WHERE status = 'pending' AND tenant_id = ANY($1::text[]) GROUP BY tenant_id`,
  owedDeliveries: `SELECT id, round,
            row_number() OVER (PARTITION BY tenant_id ORDER BY updated_at, id)::int AS backlog
     FROM (SELECT id, round, tenant_id, updated_at FROM webhook_deliveries
           WHERE status = 'pending' AND updated_at < clock_timestamp() - make_interval(secs => $1 / 1000.0)
           ORDER BY updated_at LIMIT $2) owed
     ORDER BY updated_at, id`,
  // event_at: when what it announces happened (a `webhook.disabled` notice has no event: when it was written), judged
  // against the endpoint's last disable (webhookAttemptSkippedByDisable).
  deliveryToSend: `SELECT d.id, d.tenant_id, d.endpoint_id, w.url, w.secret, d.payload, d.status, d.round, w.disabled_at,
            w.last_disabled_at, coalesce(e.created_at, d.created_at) AS event_at
     FROM webhook_deliveries d JOIN webhook_endpoints w ON w.id = d.endpoint_id
     LEFT JOIN events e ON e.id = d.event_id
     WHERE d.id = $1`,
  // The attempt's last read before signing (deliveryToSend's columns), which also marks its send in flight ($2 the
  // mark's id) until $3 ms after the database's clock, when the delivery and its endpoint still exist. FOR KEY SHARE of
  // the endpoint: a delete of it waits for this statement to commit (so the delete, once committed, sees the mark and
  // waits for the send before answering), or this statement waits for the delete and then finds no row (nothing
  // marked, nothing sent). Only the endpoint's row: the delete locks the deliveries first, then the endpoint, and this
  // locks no delivery. Marks of the endpoint's sends left past their time (a worker that died mid-send) are deleted.
  // The mark names the endpoint's tenant: a delete that finds the id gone waits only for its own tenant's sends.
  markSending: `WITH target AS (
       SELECT d.id, d.tenant_id, d.endpoint_id, w.url, w.secret, d.payload, d.status, d.round, w.disabled_at,
              w.last_disabled_at, coalesce(e.created_at, d.created_at) AS event_at
       FROM webhook_deliveries d JOIN webhook_endpoints w ON w.id = d.endpoint_id
       LEFT JOIN events e ON e.id = d.event_id
       WHERE d.id = $1
       FOR KEY SHARE OF w
     ), expired AS (
       DELETE FROM webhook_sends_in_flight
       WHERE endpoint_id = (SELECT endpoint_id FROM target) AND until < clock_timestamp()
     ), marked AS (
       INSERT INTO webhook_sends_in_flight (id, endpoint_id, tenant_id, until)
       SELECT $2, endpoint_id, tenant_id, clock_timestamp() + make_interval(secs => $3 / 1000.0) FROM target
     )
     SELECT * FROM target`,
  // The send has ended (answered, failed, timed out, or not made at all).
  clearSending: `DELETE FROM webhook_sends_in_flight WHERE id = $1`,
  // Whether a send to the endpoint may still be under way (marked, and not past its time by the database's clock);
  // with $2, only a send marked for that tenant's endpoint.
  sendingTo: `SELECT 1 FROM webhook_sends_in_flight
     WHERE endpoint_id = $1 AND ($2::text IS NULL OR tenant_id = $2) AND until > clock_timestamp() LIMIT 1`,
  // A deleted endpoint's marks left past their time (a worker that died mid-send): nothing will clear them.
  clearExpiredSendsTo: `DELETE FROM webhook_sends_in_flight
     WHERE endpoint_id = $1 AND ($2::text IS NULL OR tenant_id = $2) AND until <= clock_timestamp()`,
  // A success is also recorded on a delivery of this round skipped meanwhile (its endpoint was disabled while the
  // message was on the wire, skipEndpointPending): the receiver has it, and the log says so. A failure is not: skipped,
  // it is not retried.
  recordAttempt: `UPDATE webhook_deliveries SET status = $3, attempts = attempts + 1, last_attempt_at = clock_timestamp(),
         last_response_status = $4, last_error = $5, updated_at = clock_timestamp(),
         delivered_at = CASE WHEN $3 = 'delivered' THEN clock_timestamp() END
       WHERE id = $1 AND round = $2 AND (status = 'pending' OR (status = 'skipped' AND $3 = 'delivered'))
       RETURNING endpoint_id, tenant_id`,
  // Not on a disabled endpoint (a success in flight while another delivery disabled it): the count that disabled it
  // stays until an admin enables it.
  resetFailures: `UPDATE webhook_endpoints SET consecutive_failures = 0
       WHERE id = $1 AND consecutive_failures <> 0 AND disabled_at IS NULL`,
  // Disabled once: compare-and-set on `disabled_at IS NULL`.
  countFailure: `UPDATE webhook_endpoints SET consecutive_failures = consecutive_failures + 1,
         disabled_at = CASE WHEN consecutive_failures + 1 >= $2 THEN now() END,
         disabled_reason = CASE WHEN consecutive_failures + 1 >= $2 THEN $3 END, updated_at = now()
       WHERE id = $1 AND disabled_at IS NULL RETURNING ${ENDPOINT_COLUMNS}`,
  // The disabled endpoint's pending deliveries, skipped in the transaction that disabled it: left pending until their
  // next attempt, an enable before that attempt had them sent. SKIP LOCKED: one locked now is being recorded by another
  // worker, which holds it and waits for this endpoint's row (its failure count) — waiting for it here deadlocked;
  // that one is settled by its own attempt, or skipped at its next (the endpoint is disabled).
  skipEndpointPending: `UPDATE webhook_deliveries d SET status = 'skipped', last_error = $2, updated_at = clock_timestamp()
       WHERE d.id IN (SELECT id FROM webhook_deliveries
                      WHERE endpoint_id = $1 AND status = 'pending' ORDER BY id FOR UPDATE SKIP LOCKED)
         AND d.status = 'pending'`,
  // FOR KEY SHARE, as subscribedEndpoints: a subscriber deleted meanwhile must not roll back the attempt's record.
  disabledSubscribers: `SELECT id FROM webhook_endpoints
       WHERE tenant_id = $1 AND id <> $2 AND disabled_at IS NULL AND 'webhook.disabled' = ANY(events) FOR KEY SHARE`,
  // Settled deliveries past the retention, oldest first (webhook_deliveries_settled), a batch at a time. The outer
  // WHERE repeats the test on the row it deletes: a redelivery that made one pending after the batch was chosen (its
  // row lock waited for, then re-read) keeps it; a pending delivery is never deleted.
  pruneDeliveries: `DELETE FROM webhook_deliveries d WHERE d.id IN (
       SELECT id FROM webhook_deliveries
       WHERE status <> 'pending' AND updated_at < clock_timestamp() - make_interval(secs => $1 / 1000.0)
       ORDER BY updated_at LIMIT $2
     )
       AND d.status <> 'pending' AND d.updated_at < clock_timestamp() - make_interval(secs => $1 / 1000.0)
     RETURNING d.id`,
} as const;

export interface WebhookEndpointRow {
  id: string;
  tenant_id: string;
  url: string;
  events: string[];
  disabled_at: Date | null;
  disabled_reason: string | null;
  consecutive_failures: number;
  created_by: string | null;
  created_at: Date;
  updated_at: Date;
}

export interface WebhookDeliveryRow {
  id: string;
  endpoint_id: string;
  event_id: string | null;
  type: string;
  payload: WebhookBody;
  status: WebhookDeliveryStatus;
  round: number;
  attempts: number;
  last_attempt_at: Date | null;
  last_response_status: number | null;
  last_error: string | null;
  delivered_at: Date | null;
  created_at: Date;
}

/** The body of every delivery (Standard Webhooks): what happened, when, and the facts. */
export interface WebhookBody {
  type: WebhookEventType;
  timestamp: string;
  data: Record<string, unknown>;
}

/** A delivery round to enqueue. */
export interface OwedDelivery {
  id: string;
  round: number;
  /**
   * Its place among its tenant's waiting deliveries (1: the first). Delivery jobs are scheduled by it, so a tenant
   * with thousands waiting (a slow receiver, a burst) does not hold up another tenant's first one.
   */
  backlog: number;
}

/** A signing secret opens only in its own endpoint's row. */
function webhookSecretBinding(tenantId: string, endpointId: string): string {
  return secretBinding(tenantId, 'webhooks', endpointId);
}

/** `whsec_` and 32 random bytes, base64: the form the `standardwebhooks` libraries accept as they are. */
function newSigningSecret(): string {
  return `whsec_${randomBytes(32).toString('base64')}`;
}

/** A URL's scheme, host and port (`https://hooks.example.com`); null for one that does not parse. */
function originOf(url: string): string | null {
  try {
    return new URL(url).origin;
  } catch {
    return null;
  }
}

/** Each endpoint multiplies every event's deliveries: a tenant has at most this many. */
export const MAX_WEBHOOK_ENDPOINTS = 20;

type NewWebhookEndpoint = { tenantId: string; url: string; events: string[]; createdBy: string };

/** The Idempotency-Key a create was sent with, the request's hash, and how long the key's record lives. */
type WebhookIdempotency = { key: string; requestHash: string; ttlMs: number };

/**
 * Creates an endpoint; the signing secret is returned here, once, and stored sealed (SECRETS_KEY). Null when the
 * tenant already has MAX_WEBHOOK_ENDPOINTS. Recorded in the history of admin changes (by `createdBy`, never the
 * secret) by the same statement. Its own transaction: see createWebhookEndpointIn.
 */
export function createWebhookEndpoint(
  dataSource: DataSource,
  secrets: SecretsCipher,
  input: NewWebhookEndpoint,
): Promise<{ endpoint: WebhookEndpointRow; secret: string } | null> {
  return transaction(dataSource, async (tx) => (await createIn(tx, secrets, input, null)) as CreatedEndpoint | null);
}

/**
 * createWebhookEndpoint under an Idempotency-Key: the statement that writes the endpoint also takes the key's record
 * (naming the endpoint), so a crash leaves both or neither. Null when the tenant already has MAX_WEBHOOK_ENDPOINTS or
 * another record holds the key (nothing written either way; webhookKeyHolder tells which); `busy` when another request
 * with the key is in its create right now (nothing written, nothing waited for).
 */
export function createWebhookEndpointWithKey(
  dataSource: DataSource,
  secrets: SecretsCipher,
  input: NewWebhookEndpoint,
  idempotency: WebhookIdempotency,
): Promise<CreatedEndpoint | 'busy' | null> {
  return transaction(dataSource, (tx) => createIn(tx, secrets, input, idempotency));
}

type CreatedEndpoint = { endpoint: WebhookEndpointRow; secret: string };

/**
 * The create inside a transaction the caller holds. A count in the INSERT alone is not enough: under READ COMMITTED
 * two creates running at once each count the endpoints committed before them, and both pass at the limit. The
 * tenant's lock makes the second wait, and its INSERT (a later statement, a later snapshot) counts the first's row.
 */
export async function createWebhookEndpointIn(
  tx: Queryable,
  secrets: SecretsCipher,
  input: NewWebhookEndpoint,
): Promise<CreatedEndpoint | null> {
  return (await createIn(tx, secrets, input, null)) as CreatedEndpoint | null;
}

async function createIn(
  tx: Queryable,
  secrets: SecretsCipher,
  input: NewWebhookEndpoint,
  idempotency: WebhookIdempotency | null,
): Promise<CreatedEndpoint | 'busy' | null> {
  // Made only while the key that makes it stands (KeyRevokedError otherwise; a revocation waits for this change).
  await requireActiveKey(tx, input.createdBy);
  if (idempotency) {
    // Taken without waiting, before the tenant's lock: a second request with the key answers "in flight" at once
    // instead of queueing behind the first (then finding its record, after the tenant's lock, writes nothing).
    const [lock] = await rows<{ free: boolean }>(tx, IDEMPOTENCY_SQL.tryLockWebhookKey, [
      input.tenantId,
      idempotency.key,
    ]);
    if (!lock.free) return 'busy';
  }
  await rows(tx, WEBHOOKS_SQL.lockTenantEndpoints, [input.tenantId]);
  const id = newId('whk');
  const secret = newSigningSecret();
  const [endpoint] = await rows<WebhookEndpointRow>(tx, WEBHOOKS_SQL.createEndpoint, [
    id,
    input.tenantId,
    input.url,
    input.events,
    secrets.seal(secret, webhookSecretBinding(input.tenantId, id)),
    input.createdBy,
    MAX_WEBHOOK_ENDPOINTS,
    newId('chg'),
    idempotency?.key ?? null,
    idempotency?.requestHash ?? null,
    idempotency?.ttlMs ?? null,
  ]);
  return endpoint ? { endpoint, secret } : null;
}

/**
 * The tenant's endpoint with its signing secret opened: the answer its create gave, for a replay of that request (the
 * same Idempotency-Key and body). Null when it was deleted since. Throws SecretUnreadableError when the secret does
 * not open with this SECRETS_KEY.
 */
export async function findWebhookEndpointWithSecret(
  db: Queryable,
  secrets: SecretsCipher,
  tenantId: string,
  id: string,
): Promise<{ endpoint: WebhookEndpointRow; secret: string } | null> {
  const endpoint = await findWebhookEndpoint(db, tenantId, id);
  const sealed = await firstRow<{ secret: string }>(db, WEBHOOKS_SQL.endpointSecret, [tenantId, id]);
  if (!endpoint || !sealed) return null;
  return { endpoint, secret: secrets.open(sealed.secret, webhookSecretBinding(tenantId, id)) };
}

export function listWebhookEndpoints(db: Queryable, tenantId: string): Promise<WebhookEndpointRow[]> {
  return rows<WebhookEndpointRow>(db, WEBHOOKS_SQL.listEndpoints, [tenantId]);
}

export function findWebhookEndpoint(db: Queryable, tenantId: string, id: string): Promise<WebhookEndpointRow | null> {
  return firstRow<WebhookEndpointRow>(db, WEBHOOKS_SQL.findEndpoint, [tenantId, id]);
}

/** A change of one endpoint by an admin: `by` is the key that made it, for the history of admin changes. */
type EndpointChange = { tenantId: string; id: string; by: string };

/**
 * Deletes the endpoint and its delivery log, and records it in the history of admin changes (one statement); false
 * when the tenant has no such endpoint (nothing recorded).
 */
export async function deleteWebhookEndpoint(db: Queryable, change: EndpointChange): Promise<boolean> {
  return withinTransaction(db, async (tx) => {
    await requireActiveKey(tx, change.by);
    await rows(tx, WEBHOOKS_SQL.lockEndpointDeliveries, [change.tenantId, change.id]);
    const deleted = await rows<{ id: string }>(tx, WEBHOOKS_SQL.deleteEndpoint, [
      change.tenantId,
      change.id,
      newId('chg'),
      change.by,
    ]);
    return deleted.length > 0;
  });
}

/**
 * Re-enables a disabled endpoint with a clean failure count; events from now on are delivered to it again. Recorded
 * in the history of admin changes in the same transaction, also when it was not disabled (then before equals after).
 */
export function enableWebhookEndpoint(db: Queryable, change: EndpointChange): Promise<WebhookEndpointRow | null> {
  return withinTransaction(db, async (tx) => {
    await requireActiveKey(tx, change.by);
    const locked = await firstRow<{ before: string }>(tx, WEBHOOKS_SQL.lockEndpoint, [change.tenantId, change.id]);
    if (!locked) return null;
    return firstRow<WebhookEndpointRow>(tx, WEBHOOKS_SQL.enableEndpoint, [
      change.tenantId,
      change.id,
      newId('chg'),
      change.by,
      locked.before,
    ]);
  });
}

/**
 * A page of an endpoint's delivery log, newest first, older than `before` (an id) when given: at most `limit`
 * deliveries, and fewer once their stored text would pass `maxBytes` (one at least). `more`: another page follows.
 * Read, sized and cut by one statement (cutAtBytes).
 */
export async function listWebhookDeliveriesPage(
  db: Queryable,
  input: { tenantId: string; endpointId: string; before?: string; limit: number },
  maxBytes: number,
): Promise<{ rows: WebhookDeliveryRow[]; more: boolean }> {
  const found = await rows<Record<string, unknown>>(db, WEBHOOKS_SQL.deliveriesPage, [
    input.tenantId,
    input.endpointId,
    input.before ?? null,
    input.limit + 1,
    maxBytes,
  ]);
  return keptPage<WebhookDeliveryRow>(found);
}

/** An endpoint's delivery log, newest first; `before` is the last id of the previous page. */
export function listWebhookDeliveries(
  db: Queryable,
  input: { tenantId: string; endpointId: string; before?: string; limit: number },
): Promise<WebhookDeliveryRow[]> {
  return rows<WebhookDeliveryRow>(db, WEBHOOKS_SQL.listDeliveries, [
    input.tenantId,
    input.endpointId,
    input.before ?? null,
    input.limit,
  ]);
}

/**
 * A manual redelivery: the message goes back to pending in a new round (a job of an older round is then skipped).
 * Refused (with the reason) when the tenant has no such endpoint or no such delivery under it, its endpoint is
 * disabled, it is still pending (`round`: the round being attempted) — a round in flight and a new one would send the
 * message twice — or the key that asks (`by`) was revoked before the statement could write (`key_revoked`; checked
 * and share-locked in it). `backlog` is its place in its tenant's line (OwedDelivery): behind the tenant's other
 * redeliveries still waiting, so that an admin redelivering many messages at once does not put them all first, before
 * every other tenant's first waiting delivery.
 */
export async function redeliverWebhook(
  db: Queryable,
  input: { tenantId: string; endpointId: string; deliveryId: string; by: string },
): Promise<
  | { delivery: WebhookDeliveryRow; backlog: number }
  | { refused: 'webhook_not_found' | 'delivery_not_found' | 'endpoint_disabled' | 'key_revoked' }
  | { refused: 'pending'; round: number }
> {
  const [redelivered] = await rows<WebhookDeliveryRow & { backlog: number }>(db, WEBHOOKS_SQL.redeliver, [
    input.tenantId,
    input.endpointId,
    input.deliveryId,
    input.by,
  ]);
  if (redelivered) {
    const { backlog, ...delivery } = redelivered;
    return { delivery, backlog };
  }
  const [found] = await rows<{ status: string | null; round: number | null; disabled: boolean; key_stands: boolean }>(
    db,
    WEBHOOKS_SQL.redeliveryRefusal,
    [input.deliveryId, input.endpointId, input.tenantId, input.by],
  );
  // As every other path under an endpoint: one not the tenant's reads as one that does not exist.
  if (!found) return { refused: 'webhook_not_found' };
  if (found.status === null || found.round === null) return { refused: 'delivery_not_found' };
  if (!found.key_stands) return { refused: 'key_revoked' };
  if (found.disabled) return { refused: 'endpoint_disabled' };
  return { refused: 'pending', round: found.round };
}

/**
 * Whether the tenant has the endpoint and a delivery of that id under it: what a redelivery acts on (read with the
 * query its refusal is explained by; `by`, the key that asks, is read there too and not used here).
 */
export async function webhookDeliveryExists(
  db: Queryable,
  input: { tenantId: string; endpointId: string; deliveryId: string; by: string },
): Promise<boolean> {
  const [found] = await rows<{ status: string | null }>(db, WEBHOOKS_SQL.redeliveryRefusal, [
    input.deliveryId,
    input.endpointId,
    input.tenantId,
    input.by,
  ]);
  return found !== undefined && found.status !== null;
}

/**
 * Deletes up to `limit` settled deliveries (delivered, failed, skipped) whose last change (an attempt, a redelivery) is
 * older than `retentionMs`; how many. A pending one is never deleted, so nothing owed is lost, and one redelivered
 * meanwhile is kept (checked on the row the statement deletes).
 */
export async function pruneWebhookDeliveries(db: Queryable, retentionMs: number, limit: number): Promise<number> {
  return (await rows<{ id: string }>(db, WEBHOOKS_SQL.pruneDeliveries, [retentionMs, limit])).length;
}

/** Why a delivery is skipped when its endpoint is disabled (its `last_error`). */
export const ENDPOINT_DISABLED_SKIP = 'endpoint disabled before this delivery';

/** A delivery that will not be sent (its endpoint was disabled before its turn): recorded, so nothing owes it. */
export async function skipWebhookDelivery(db: Queryable, deliveryId: string, round: number, why: string) {
  await rows(db, WEBHOOKS_SQL.skipDelivery, [deliveryId, round, why]);
}

interface CandidateEvent {
  id: string;
  txid: string;
  tenant_id: string;
  execution_id: string;
  operation_id: string | null;
  type: string;
  from_status: string | null;
  to_status: string | null;
  data: Record<string, unknown>;
  seq: string;
  created_at: Date;
  agent_id: string;
  operation_key: string | null;
  connector: string | null;
  action: string | null;
  verification_method: VerificationMethodValue | null;
}

/** One operation as `execution.finished` sums it up: whether its effect happened, as GET shows it. */
export interface FinishedOperation {
  id: string;
  key: string;
  status: OperationStatus;
  commit: Commit;
}

interface FinishedOperationRow {
  execution_id: string;
  id: string;
  key: string;
  status: OperationStatus;
  attempt: number;
  terminal_reason: TerminalReason | null;
  acknowledged: boolean;
  rejected: boolean;
  effect_shown_after: boolean;
}

/** The operations of each execution announced as finished in this batch, by execution id (one statement). */
async function finishedOperationsOf(db: Queryable, executionIds: string[]): Promise<Map<string, FinishedOperation[]>> {
  const byExecution = new Map<string, FinishedOperation[]>();
  if (executionIds.length === 0) return byExecution;
  for (const op of await rows<FinishedOperationRow>(db, WEBHOOKS_SQL.finishedOperations, [executionIds])) {
    const commit = commitOf({
      status: op.status,
      everSent: everSent(op),
      terminalReason: op.terminal_reason,
      failureRefuted: failureRefuted({
        status: op.status,
        acknowledged: op.acknowledged,
        effectShownAfter: op.effect_shown_after,
      }),
      verificationContradicted: verificationContradicted({ status: op.status, rejected: op.rejected }),
    });
    const list = byExecution.get(op.execution_id) ?? [];
    list.push({ id: op.id, key: op.key, status: op.status, commit });
    byExecution.set(op.execution_id, list);
  }
  return byExecution;
}

/**
 * What a receiver is told about one event (snake_case, like the REST API). `execution.finished` also carries its
 * execution's `operations` (id, key, status, commit): the execution's status says where the agent's work stands, not
 * whether its effects happened.
 */
export function webhookBodyOf(
  type: WebhookEventType,
  e: CandidateEvent,
  operations?: readonly FinishedOperation[],
): WebhookBody {
  const data: Record<string, unknown> = {
    event_id: e.id,
    execution_id: e.execution_id,
    agent_id: e.agent_id,
    seq: Number(e.seq),
  };
  if (e.operation_id) {
    Object.assign(data, {
      operation_id: e.operation_id,
      operation_key: e.operation_key,
      connector: e.connector,
      action: e.action,
      verification_method: e.verification_method,
    });
  }
  if (e.to_status) Object.assign(data, { status: e.to_status, previous_status: e.from_status });
  // A re-check's finding, a late 2xx or a late rejection moves nothing: the status is the one the operation keeps (the
  // one it contradicts).
  else if (
    (e.type === 'operation.rechecked' ||
      e.type === 'operation.acknowledged_late' ||
      e.type === 'operation.rejected_late') &&
    typeof e.data.after === 'string'
  )
    data.status = e.data.after;
  if (e.type === 'operation.status_changed') data.terminal_reason = e.data.reason ?? null;
  // The event's own record, as GET /v1/executions/{id}/events shows it (outcome verdicts, escalation target...).
  data.detail = e.data;
  if (type === 'execution.finished') data.operations = operations ?? [];
  return { type, timestamp: new Date(e.created_at).toISOString(), data };
}

/**
 * One outbox pass: up to `limit` new candidate events become delivery rows, and the cursor moves past them, in one
 * transaction. Null when another reconciler holds the cursor (its pass covers the same events).
 */
export async function scanWebhookOutbox(
  dataSource: DataSource,
  limit: number,
): Promise<{ scanned: number; created: OwedDelivery[] } | null> {
  return transaction(dataSource, async (tx) => {
    const [cursor] = await rows<{ last_txid: string; last_event_id: string }>(tx, WEBHOOKS_SQL.lockCursor);
    if (!cursor) return null;
    const events = await rows<CandidateEvent>(tx, WEBHOOKS_SQL.candidateEvents, [
      cursor.last_txid,
      cursor.last_event_id,
      limit,
    ]);
    if (events.length === 0) return { scanned: 0, created: [] };
    const tenants = [...new Set(events.map((e) => e.tenant_id))];
    const endpoints = await rows<{
      id: string;
      tenant_id: string;
      events: string[];
      created_at: Date;
      disabled_at: Date | null;
      last_disabled_at: Date | null;
      reenabled_at: Date | null;
    }>(tx, WEBHOOKS_SQL.subscribedEndpoints, [tenants]);
    const deliveries: NewDelivery[] = [];
    const announced = events.map((event) => ({
      event,
      type: webhookEventFor({
        type: event.type,
        toStatus: event.to_status,
        verificationMethod: event.verification_method,
        after: typeof event.data.after === 'string' ? event.data.after : null,
      }),
    }));
    // Only for executions some endpoint is owed news of (the same pass may announce one to no endpoint at all).
    const finished = await finishedOperationsOf(tx, [
      ...new Set(
        announced
          .filter((a) => a.type === 'execution.finished' && endpoints.some((w) => w.tenant_id === a.event.tenant_id))
          .map((a) => a.event.execution_id),
      ),
    ]);
    for (const { event, type } of announced) {
      if (!type) continue;
      for (const endpoint of endpoints) {
        if (endpoint.tenant_id !== event.tenant_id) continue;
        // One disabled since the event is still owed it: the delivery is written (on its log, redeliverable), skipped.
        const date = (d: Date | null) => d && new Date(d);
        const owed = webhookOwedTo(
          {
            events: endpoint.events,
            createdAt: new Date(endpoint.created_at),
            disabledAt: date(endpoint.disabled_at),
            lastDisabledAt: date(endpoint.last_disabled_at),
            reenabledAt: date(endpoint.reenabled_at),
          },
          type,
          new Date(event.created_at),
        );
        if (!owed) continue;
        const body = webhookBodyOf(type, event, finished.get(event.execution_id));
        const skipped = webhookSkippedByDisable(
          { disabledAt: date(endpoint.disabled_at), lastDisabledAt: date(endpoint.last_disabled_at) },
          new Date(event.created_at),
        );
        deliveries.push({
          id: newId('msg'),
          endpointId: endpoint.id,
          tenantId: event.tenant_id,
          eventId: event.id,
          body,
          skipped: skipped ? ENDPOINT_DISABLED_SKIP : null,
        });
      }
    }
    const created = deliveries.length === 0 ? [] : await insertDeliveries(tx, deliveries);
    const last = events[events.length - 1];
    await rows(tx, WEBHOOKS_SQL.advanceCursor, [last.txid, last.id]);
    return { scanned: events.length, created };
  });
}

interface NewDelivery {
  id: string;
  endpointId: string;
  tenantId: string;
  eventId: string | null;
  body: WebhookBody;
  /** Written skipped, with this reason, not pending (its endpoint was disabled after the event). */
  skipped?: string | null;
}

/** Writes the deliveries; returns the pending ones written (a skipped one is owed no attempt). */
async function insertDeliveries(db: Queryable, deliveries: NewDelivery[]): Promise<OwedDelivery[]> {
  const written = await rows<{ id: string; round: number; tenant_id: string; status: string }>(
    db,
    WEBHOOKS_SQL.insertDeliveries,
    [
      deliveries.map((d) => d.id),
      deliveries.map((d) => d.endpointId),
      deliveries.map((d) => d.tenantId),
      deliveries.map((d) => d.eventId),
      deliveries.map((d) => d.body.type),
      deliveries.map((d) => JSON.stringify(d.body)),
      deliveries.map((d) => d.skipped ?? null),
    ],
  );
  const inserted = written.filter((d) => d.status === 'pending');
  if (inserted.length === 0) return [];
  const tenants = [...new Set(inserted.map((d) => d.tenant_id))];
  const pending = new Map(
    (await rows<{ tenant_id: string; n: number }>(db, WEBHOOKS_SQL.pendingByTenant, [tenants])).map((r) => [
      r.tenant_id,
      r.n,
    ]),
  );
  // The new ones come last in their tenant's line: the first of them follows what was already waiting.
  const next = new Map(
    tenants.map((t) => [t, (pending.get(t) ?? 0) - inserted.filter((d) => d.tenant_id === t).length + 1]),
  );
  return inserted.map((d) => {
    const backlog = Math.max(1, next.get(d.tenant_id) ?? 1);
    next.set(d.tenant_id, backlog + 1);
    return { id: d.id, round: d.round, backlog };
  });
}

/**
 * Pending deliveries untouched for `olderThanMs` (their job was lost with Redis, or never made): to enqueue again.
 * The job id names the round, so a job still waiting in Redis is not duplicated.
 */
export function owedWebhookDeliveries(db: Queryable, olderThanMs: number, limit: number): Promise<OwedDelivery[]> {
  return rows<OwedDelivery>(db, WEBHOOKS_SQL.owedDeliveries, [olderThanMs, limit]);
}

export interface DeliveryToSend {
  id: string;
  tenantId: string;
  endpointId: string;
  url: string;
  /** Null when it cannot be opened (`secretUnreadable` says why): nothing can be signed. */
  secret: string | null;
  /**
   * Why the signing secret does not open (SECRETS_KEY unset, or not the key it was sealed with): the attempt fails
   * with this, as one that could not reach the receiver. Names no key and no secret.
   */
  secretUnreadable: string | null;
  body: WebhookBody;
  /** Why nothing is to be sent: the delivery moved on (another round, already settled) or its endpoint is disabled. */
  skip: 'settled' | 'older_round' | 'endpoint_disabled' | null;
}

/** What a delivery job needs, with the signing secret opened; null when the delivery (or its endpoint) is gone. */
export async function loadDeliveryToSend(
  db: Queryable,
  secrets: SecretsCipher,
  deliveryId: string,
  round: number,
): Promise<DeliveryToSend | null> {
  const [row] = await rows<DeliveryToSendRow>(db, WEBHOOKS_SQL.deliveryToSend, [deliveryId]);
  return row ? deliveryToSendOf(row, secrets, round) : null;
}

/**
 * A delivery's last read before its attempt signs and sends it (as loadDeliveryToSend reads it), in the statement that
 * marks the send in flight for `inFlightMs` (webhookSendInFlightMs) when the delivery and its endpoint still exist:
 * a delete of the endpoint committed after this waits for the send (waitForWebhookSends) before it answers. `mark`
 * names the mark: clear it (clearWebhookSend) once the request has ended, or at once if nothing is sent. Null when the
 * delivery or its endpoint is gone (nothing marked).
 */
export async function markWebhookSending(
  db: Queryable,
  secrets: SecretsCipher,
  input: { deliveryId: string; round: number; mark: string; inFlightMs: number },
): Promise<DeliveryToSend | null> {
  const [row] = await rows<DeliveryToSendRow>(db, WEBHOOKS_SQL.markSending, [
    input.deliveryId,
    input.mark,
    input.inFlightMs,
  ]);
  return row ? deliveryToSendOf(row, secrets, input.round) : null;
}

/** The send marked `mark` (markWebhookSending) has ended, or was not made. */
export async function clearWebhookSend(db: Queryable, mark: string): Promise<void> {
  await rows(db, WEBHOOKS_SQL.clearSending, [mark]);
}

/**
 * Resolves once no send to the endpoint is under way: every send marked in flight before now (markWebhookSending) has
 * cleared its mark or passed its time, read every `pollMs`. A deleted endpoint's delete waits for it before answering,
 * so that nothing signed with its secret reaches the receiver after the answer; so does a delete that finds the id
 * gone (another delete of it committed first), for the sends of its own tenant only (`ofTenant`): it never waits on,
 * nor times, another tenant's endpoint. `onWaiting` is called once, when a send is found under way.
 */
export async function waitForWebhookSends(
  db: Queryable,
  endpointId: string,
  options: { ofTenant?: string; pollMs?: number; onWaiting?: () => void } = {},
): Promise<void> {
  const params = [endpointId, options.ofTenant ?? null];
  let waiting = false;
  while ((await rows(db, WEBHOOKS_SQL.sendingTo, params)).length > 0) {
    if (!waiting) options.onWaiting?.();
    waiting = true;
    await new Promise((resolve) => setTimeout(resolve, options.pollMs ?? 25));
  }
  await rows(db, WEBHOOKS_SQL.clearExpiredSendsTo, params);
}

interface DeliveryToSendRow {
  id: string;
  tenant_id: string;
  endpoint_id: string;
  url: string;
  secret: string;
  payload: WebhookBody;
  status: string;
  round: number;
  disabled_at: Date | null;
  last_disabled_at: Date | null;
  event_at: Date;
}

function deliveryToSendOf(row: DeliveryToSendRow, secrets: SecretsCipher, round: number): DeliveryToSend {
  // A secret that does not open fails the attempt (recorded, counted, the endpoint disabled in the end). Thrown, it
  // failed every job before any attempt was recorded: the delivery stayed pending for ever, re-armed every ~30 s.
  let secret: string | null = null;
  let secretUnreadable: string | null = null;
  try {
    secret = secrets.open(row.secret, webhookSecretBinding(row.tenant_id, row.endpoint_id));
  } catch (error) {
    if (!(error instanceof SecretUnreadableError)) throw error;
    secretUnreadable = secrets.sealing
      ? 'the endpoint’s signing secret does not open with this SECRETS_KEY (not the key it was sealed with): set that key, or delete the endpoint and create it again'
      : 'the endpoint’s signing secret is sealed but SECRETS_KEY is not set: set the key it was sealed with, or delete the endpoint and create it again';
  }
  return {
    id: row.id,
    tenantId: row.tenant_id,
    endpointId: row.endpoint_id,
    url: row.url,
    secret,
    secretUnreadable,
    body: row.payload,
    skip:
      row.round !== round
        ? 'older_round'
        : row.status !== 'pending'
          ? 'settled'
          : webhookAttemptSkippedByDisable(
                { disabledAt: row.disabled_at, lastDisabledAt: row.last_disabled_at },
                new Date(row.event_at),
                row.round,
              )
            ? 'endpoint_disabled'
            : null,
  };
}

export type AttemptOutcome = { ok: true; status: number } | { ok: false; status: number | null; error: string };

export interface AttemptRecorded {
  /** `stale`: the delivery moved on meanwhile (a redelivery, or another worker), nothing was written. */
  state: 'delivered' | 'retrying' | 'failed' | 'stale';
  /** Set when this failure disabled the endpoint: the `webhook.disabled` deliveries to enqueue. */
  disabled?: { reason: string; notices: OwedDelivery[] };
}

/**
 * Records one attempt. A success resets the endpoint's failure count; the last failed attempt of a delivery fails
 * it and counts against the endpoint, which is disabled (once: compare-and-set on `disabled_at IS NULL`) when that
 * makes `disableAfter` failed deliveries in a row; its pending deliveries are then skipped, and the tenant's other
 * endpoints subscribed to `webhook.disabled` told, in the same transaction.
 */
export async function recordWebhookAttempt(
  dataSource: DataSource,
  input: { deliveryId: string; round: number; outcome: AttemptOutcome; final: boolean; disableAfter: number },
): Promise<AttemptRecorded> {
  const { outcome } = input;
  return transaction(dataSource, async (tx) => {
    const status = outcome.ok ? 'delivered' : input.final ? 'failed' : 'pending';
    const [delivery] = await rows<{ endpoint_id: string; tenant_id: string }>(tx, WEBHOOKS_SQL.recordAttempt, [
      input.deliveryId,
      input.round,
      status,
      outcome.status,
      outcome.ok ? null : outcome.error.slice(0, 500),
    ]);
    if (!delivery) return { state: 'stale' };
    if (outcome.ok) {
      await rows(tx, WEBHOOKS_SQL.resetFailures, [delivery.endpoint_id]);
      return { state: 'delivered' };
    }
    if (!input.final) return { state: 'retrying' };
    const reason = `${input.disableAfter} consecutive deliveries failed (last: ${outcome.error.slice(0, 200)})`;
    const [disabled] = await rows<WebhookEndpointRow>(tx, WEBHOOKS_SQL.countFailure, [
      delivery.endpoint_id,
      input.disableAfter,
      reason,
    ]);
    if (!disabled?.disabled_at) return { state: 'failed' };
    await rows(tx, WEBHOOKS_SQL.skipEndpointPending, [delivery.endpoint_id, ENDPOINT_DISABLED_SKIP]);
    const others = await rows<{ id: string }>(tx, WEBHOOKS_SQL.disabledSubscribers, [
      delivery.tenant_id,
      delivery.endpoint_id,
    ]);
    const body: WebhookBody = {
      type: 'webhook.disabled',
      timestamp: new Date(disabled.disabled_at).toISOString(),
      // The endpoint's origin, never its whole URL: a path or query may be the receiver's credential (a chat service's
      // incoming-webhook URL is), and the other endpoints may be other parties.
      data: { endpoint_id: disabled.id, origin: originOf(disabled.url), reason, disabled_at: disabled.disabled_at },
    };
    const notices = await insertDeliveries(
      tx,
      others.map((o) => ({ id: newId('msg'), endpointId: o.id, tenantId: delivery.tenant_id, eventId: null, body })),
    );
    return { state: 'failed', disabled: { reason, notices } };
  });
}
