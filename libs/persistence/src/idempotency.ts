import { Queryable, rows } from './sql';

/** Why intake wrote nothing under an Idempotency-Key: the record that holds the key. */
export type IdempotencyHolder = { kind: 'replay'; executionId: string } | { kind: 'in_flight' } | { kind: 'mismatch' };

export const IDEMPOTENCY_SQL = {
  // A record the intake statement would take over (expired, or in flight and abandoned) holds nothing.
  find: `SELECT request_hash, state, execution_id FROM idempotency_keys
     WHERE tenant_id = $1 AND route = 'executions' AND key = $2 AND expires_at >= now()
     AND NOT (state = 'in_flight' AND created_at < now() - make_interval(secs => $3 / 1000.0))`,
} as const;

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
