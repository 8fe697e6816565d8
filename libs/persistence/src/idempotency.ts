import { randomUUID } from 'node:crypto';
import { Queryable, rows } from './sql';

export type IdempotencyClaim =
  | { kind: 'claimed'; token: string }
  | { kind: 'replay'; executionId: string }
  | { kind: 'in_flight' }
  | { kind: 'mismatch' };

export const IDEMPOTENCY_SQL = {
  claim: `INSERT INTO idempotency_keys (tenant_id, key, request_hash, state, expires_at, claim_token)
     VALUES ($1, $2, $3, 'in_flight', now() + make_interval(secs => $4 / 1000.0), $6)
     ON CONFLICT (tenant_id, key) DO UPDATE
       SET request_hash = EXCLUDED.request_hash, state = 'in_flight', execution_id = NULL,
           created_at = now(), expires_at = EXCLUDED.expires_at, claim_token = EXCLUDED.claim_token
       WHERE idempotency_keys.expires_at < now()
          OR (idempotency_keys.state = 'in_flight'
              AND idempotency_keys.created_at < now() - make_interval(secs => $5 / 1000.0))
     RETURNING key`,
  find: `SELECT request_hash, state, execution_id FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`,
  release: `DELETE FROM idempotency_keys WHERE tenant_id = $1 AND key = $2 AND state = 'in_flight' AND claim_token = $3`,
} as const;

/**
 * I8 with a unique key, not a read-then-write race: the INSERT decides who owns the key. An expired record, or an
 * in-flight one abandoned by a crashed request, may be taken over. Each claim gets a token of its own, and intake
 * writes only while its claim still holds it (insertExecution), so a request that was merely slow, and lost its
 * claim to a retry, cannot create a second execution.
 */
export async function claimIdempotencyKey(
  db: Queryable,
  input: { tenantId: string; key: string; hash: string; ttlMs: number; abandonAfterMs: number },
): Promise<IdempotencyClaim> {
  const token = randomUUID();
  const claimed = await rows<{ key: string }>(db, IDEMPOTENCY_SQL.claim, [
    input.tenantId,
    input.key,
    input.hash,
    input.ttlMs,
    input.abandonAfterMs,
    token,
  ]);
  if (claimed.length === 1) return { kind: 'claimed', token };
  const existing = await rows<{ request_hash: string; state: string; execution_id: string | null }>(
    db,
    IDEMPOTENCY_SQL.find,
    [input.tenantId, input.key],
  );
  const record = existing[0];
  if (!record) return claimIdempotencyKey(db, input);
  if (record.request_hash !== input.hash) return { kind: 'mismatch' };
  if (record.state === 'completed' && record.execution_id) return { kind: 'replay', executionId: record.execution_id };
  return { kind: 'in_flight' };
}

/** Gives up this request's claim (it failed before writing); a claim since taken over is not ours to delete. */
export async function releaseIdempotencyKey(
  db: Queryable,
  tenantId: string,
  key: string,
  token: string,
): Promise<void> {
  await db.query(IDEMPOTENCY_SQL.release, [tenantId, key, token]);
}
