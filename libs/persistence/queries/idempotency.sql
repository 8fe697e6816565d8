-- find
SELECT request_hash, state, execution_id FROM idempotency_keys WHERE tenant_id = $1 AND key = $2;
