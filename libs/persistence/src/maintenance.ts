import { Queryable, rows } from './sql';

/** How long the sweep log keeps a run: long enough to see what the sweeper did today, not forever. */
export const SWEEP_LOG_RETENTION_SECONDS = 24 * 60 * 60;

export const MAINTENANCE_SQL = {
  pruneIdempotency: `DELETE FROM idempotency_keys WHERE (tenant_id, route, key) IN (
       SELECT tenant_id, route, key FROM idempotency_keys WHERE expires_at < now() ORDER BY expires_at LIMIT $1
     ) RETURNING key`,
  pruneSweepLog: `DELETE FROM sweep_log WHERE id IN (
       SELECT id FROM sweep_log WHERE started_at < now() - make_interval(secs => $2) ORDER BY id LIMIT $1
     ) RETURNING id`,
} as const;

/**
 * Tables that would otherwise only grow, pruned a batch at a time by the sweeper: idempotency records past their 24 h
 * (an expired record is replaced by the next claim of its key anyway, so deleting it changes no answer), and sweep
 * log rows older than the retention. Oldest first, through an index, so a batch never scans the table.
 */
export async function pruneExpired(db: Queryable, limit: number): Promise<{ idempotency: number; sweepLog: number }> {
  const idempotency = await rows<{ key: string }>(db, MAINTENANCE_SQL.pruneIdempotency, [limit]);
  const sweepLog = await rows<{ id: string }>(db, MAINTENANCE_SQL.pruneSweepLog, [limit, SWEEP_LOG_RETENTION_SECONDS]);
  return { idempotency: idempotency.length, sweepLog: sweepLog.length };
}
