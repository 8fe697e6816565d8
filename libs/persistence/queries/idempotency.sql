-- find
SELECT request_hash, state, execution_id FROM idempotency_keys
     WHERE tenant_id = $1 AND route = 'executions' AND key = $2 AND expires_at >= now()
     AND NOT (state = 'in_flight' AND created_at < now() - make_interval(secs => $3 / 1000.0));

-- findWebhook
SELECT request_hash, webhook_endpoint_id FROM idempotency_keys
     WHERE tenant_id = $1 AND route = 'webhooks' AND key = $2 AND expires_at >= now();

-- tryLockWebhookKey
SELECT pg_try_advisory_xact_lock(hashtextextended('webhooks' || chr(31) || $1 || chr(31) || $2, 0))
     AS free;
