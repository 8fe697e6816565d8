-- find
SELECT request_hash, state, execution_id FROM idempotency_keys
     WHERE tenant_id = $1 AND route = 'executions' AND key = $2 AND expires_at >= now()
     AND NOT (state = 'in_flight' AND created_at < now() - make_interval(secs => $3 / 1000.0));
