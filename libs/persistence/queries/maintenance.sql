-- pruneIdempotency
DELETE FROM idempotency_keys WHERE (tenant_id, route, key) IN (
       SELECT tenant_id, route, key FROM idempotency_keys WHERE expires_at < now() ORDER BY expires_at LIMIT $1
     ) RETURNING key;

-- pruneSweepLog
DELETE FROM sweep_log WHERE id IN (
       SELECT id FROM sweep_log WHERE started_at < now() - make_interval(secs => $2) ORDER BY id LIMIT $1
     ) RETURNING id;
