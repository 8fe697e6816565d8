-- claim
INSERT INTO idempotency_keys (tenant_id, key, request_hash, state, expires_at, claim_token)
     VALUES ($1, $2, $3, 'in_flight', now() + make_interval(secs => $4 / 1000.0), $6)
     ON CONFLICT (tenant_id, key) DO UPDATE
       SET request_hash = EXCLUDED.request_hash, state = 'in_flight', execution_id = NULL,
           created_at = now(), expires_at = EXCLUDED.expires_at, claim_token = EXCLUDED.claim_token
       WHERE idempotency_keys.expires_at < now()
          OR (idempotency_keys.state = 'in_flight'
              AND idempotency_keys.created_at < now() - make_interval(secs => $5 / 1000.0))
     RETURNING key;

-- find
SELECT request_hash, state, execution_id FROM idempotency_keys WHERE tenant_id = $1 AND key = $2;

-- release
DELETE FROM idempotency_keys WHERE tenant_id = $1 AND key = $2 AND state = 'in_flight' AND claim_token = $3;
