import { Queryable, rows } from './sql';

/** Why intake wrote nothing under an Idempotency-Key: the record that holds the key. */
export type IdempotencyHolder = { kind: 'replay'; executionId: string } | { kind: 'in_flight' } | { kind: 'mismatch' };

export const IDEMPOTENCY_SQL = {
  // A record the intake statement would take over (expired, or in flight and abandoned) holds nothing.
  find: `SELECT request_hash, state, execution_id FROM idempotency_keys
     WHERE tenant_id = $1 AND route = 'executions' AND key = $2 AND expires_at >= now()
     AND NOT (state = 'in_flight' AND created_at < now() - make_interval(secs => $3 / 1000.0))`,
  // POST /v1/admin/webhooks: its records are written completed, with the endpoint, by the create's statement.
  findWebhook: `SELECT request_hash, webhook_endpoint_id FROM idempotency_keys
     WHERE tenant_id = $1 AND route = 'webhooks' AND key = $2 AND expires_at >= now()`,
  // Another request with this webhook key is in its transaction right now: answer "in flight" instead of waiting for
  // it (a namespace of its own: an execution's key of the same text is another key).
  tryLockWebhookKey: `SELECT pg_try_advisory_xact_lock(hashtextextended('webhooks' || chr(31) || $1 || chr(31) || $2, 0))
     AS free`,
} as const;

/** What holds a webhook create's Idempotency-Key: the endpoint it created (which may be deleted since), or another body. */
export type WebhookKeyHolder = { kind: 'replay'; endpointId: string } | { kind: 'mismatch' };

/**
 * The record of a `POST /v1/admin/webhooks` Idempotency-Key of the tenant; null when none holds it (never used, or
 * expired).
 */
export async function webhookKeyHolder(
  db: Queryable,
  tenantId: string,
  key: string,
  requestHash: string,
): Promise<WebhookKeyHolder | null> {
  const [record] = await rows<{ request_hash: string; webhook_endpoint_id: string }>(db, IDEMPOTENCY_SQL.findWebhook, [
    tenantId,
    key,
  ]);
  if (!record) return null;
  if (record.request_hash !== requestHash) return { kind: 'mismatch' };
  return { kind: 'replay', endpointId: record.webhook_endpoint_id };
}

/**
 * I8 with a unique key, not a read-then-write race: the intake statement itself inserts the key's record (completed,
 * with its execution) or takes over an expired one, so of any number of concurrent requests with one key one writes;
 * the others wait for its commit on the key's index entry and then write nothing. This says what holds the key: the
 * execution to replay, a request still in flight (a record an older version left `in_flight`), or a different body.
 * null: no record that holds the key (it expired, was abandoned or pruned meanwhile) — intake may simply try again.
 */
export async function idempotencyHolder(
  db: Queryable,
  tenantId: string,
  key: string,
  /** The request's hash; more than one when earlier versions hashed the same request otherwise (any one matches). */
  requestHash: string | readonly string[],
  abandonAfterMs: number,
): Promise<IdempotencyHolder | null> {
  const [record] = await rows<{ request_hash: string; state: string; execution_id: string | null }>(
    db,
    IDEMPOTENCY_SQL.find,
    [tenantId, key, abandonAfterMs],
  );
  if (!record) return null;
  const same = typeof requestHash === 'string' ? [requestHash] : requestHash;
  if (!same.includes(record.request_hash)) return { kind: 'mismatch' };
  if (record.state === 'completed' && record.execution_id) return { kind: 'replay', executionId: record.execution_id };
  return { kind: 'in_flight' };
}
