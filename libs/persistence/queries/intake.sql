-- insertExecution
WITH stands AS MATERIALIZED (
       SELECT $17::text IS NULL OR EXISTS (
         SELECT 1 FROM api_keys k WHERE k.id = $17 AND k.tenant_id = $2 AND k.revoked_at IS NULL FOR SHARE
       ) AS yes
     ), unsettled AS MATERIALIZED (
       SELECT o.id, o.execution_id, o.key, o.status, r.position
       FROM jsonb_to_recordset($8::jsonb) AS r(position int, connector text, resend_ref text)
       CROSS JOIN LATERAL (
         SELECT o.id, o.execution_id, o.key, o.status FROM operations o
         WHERE o.tenant_id = $2 AND o.connector = r.connector AND o.resend_ref = r.resend_ref AND o.resend_ref IS NOT NULL
           AND o.status IN ('SENT', 'UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW') AND o.attempt > 0
         ORDER BY o.id LIMIT 1
       ) o
       WHERE r.resend_ref IS NOT NULL
       ORDER BY r.position, o.id LIMIT 1
     ), capped AS (
       SELECT $13::text[] IS NOT NULL AND EXISTS (
         SELECT 1 FROM tenant_connector_settings s
         WHERE s.tenant_id = $2 AND s.connector = ANY($13::text[]) AND jsonb_path_exists(s.spending_caps, '$[*].max_amount')
       ) AS caps, $16::text[] IS NOT NULL AND EXISTS (
         SELECT 1 FROM tenant_connector_secrets x WHERE x.tenant_id = $2 AND x.connector = ANY($16::text[])
       ) AS secrets
     ), unchecked AS (
       SELECT caps, secrets, caps OR secrets AS yes FROM capped
     ), held AS (
       SELECT u.yes OR EXISTS (SELECT 1 FROM unsettled) OR NOT k.yes AS yes FROM unchecked u, stands k
     ), free AS MATERIALIZED (
       -- Another request with this key is writing right now: answer "in flight" instead of waiting for it.
       SELECT $7::text IS NULL OR pg_try_advisory_xact_lock(hashtextextended($2 || chr(31) || $7, 0)) AS yes
     ), claim AS (
       INSERT INTO idempotency_keys (tenant_id, route, key, request_hash, state, execution_id, expires_at)
       SELECT $2, 'executions', $7, $11, 'completed', $1, now() + make_interval(secs => GREATEST($14 / 1000.0, $5::double precision))
       WHERE $7::text IS NOT NULL AND NOT (SELECT yes FROM held) AND (SELECT yes FROM free)
       ON CONFLICT (tenant_id, route, key) DO UPDATE
         SET request_hash = EXCLUDED.request_hash, state = 'completed', execution_id = EXCLUDED.execution_id,
             created_at = now(), expires_at = EXCLUDED.expires_at, claim_token = NULL
         WHERE idempotency_keys.expires_at < now()
            OR (idempotency_keys.state = 'in_flight'
                AND idempotency_keys.created_at < now() - make_interval(secs => $15 / 1000.0))
       RETURNING key
     ), e AS (
       INSERT INTO executions (id, tenant_id, agent_id, intent, status, deadline_at, criteria, idempotency_key, event_seq,
                               trace_parent)
       SELECT $1::text, $2::text, $3::text, $4::text, 'created', now() + make_interval(secs => $5::double precision),
              $6::jsonb, $7::text, 1, $12::text
       WHERE NOT (SELECT yes FROM held) AND ($7::text IS NULL OR EXISTS (SELECT 1 FROM claim))
       RETURNING id, tenant_id, created_at, deadline_at, updated_at
     ), o AS (
       INSERT INTO operations (id, execution_id, tenant_id, key, position, connector, action, params, irreversible,
                               requires_approval, verification_method, expected_state, depends_on, approval, resend_ref,
                               status)
       SELECT r.id, e.id, e.tenant_id, r.key, r.position, r.connector, r.action, r.params, r.irreversible,
              r.requires_approval, r.verification_method, r.expected_state, r.depends_on, r.approval, r.resend_ref,
              'PREPARED'
       FROM e, jsonb_to_recordset($8::jsonb) AS r(id text, key text, position int, connector text, action text,
            params jsonb, irreversible boolean, requires_approval boolean, verification_method text,
            expected_state jsonb, depends_on text[], approval jsonb, resend_ref text)
       RETURNING id
     ), ev AS (
       INSERT INTO events (id, execution_id, tenant_id, seq, type, to_status, data)
       SELECT $9, e.id, e.tenant_id, 1, 'execution.created', 'created', $10 FROM e
     )
     SELECT e.created_at, e.deadline_at, e.updated_at, (SELECT count(*) FROM o) AS n, false AS capped,
            false AS secrets, false AS busy, NULL AS unsettled_id, NULL AS unsettled_execution_id,
            NULL AS unsettled_key, NULL AS unsettled_status, NULL::int AS unsettled_position, false AS revoked FROM e
     UNION ALL SELECT NULL, NULL, NULL, 0, u.caps, u.secrets, false, NULL, NULL, NULL, NULL, NULL, false
       FROM unchecked u, stands k WHERE u.yes AND k.yes
     UNION ALL SELECT NULL, NULL, NULL, 0, false, false, false, x.id, x.execution_id, x.key, x.status, x.position, false
       FROM unsettled x, unchecked u, stands k WHERE NOT u.yes AND k.yes
     UNION ALL SELECT NULL, NULL, NULL, 0, false, false, true, NULL, NULL, NULL, NULL, NULL, false
       FROM free, held WHERE NOT free.yes AND NOT held.yes
     UNION ALL SELECT NULL, NULL, NULL, 0, false, false, false, NULL, NULL, NULL, NULL, NULL, true
       FROM stands k WHERE NOT k.yes;

-- setRetryOf
UPDATE operations SET retry_of = $2 WHERE id = $1 AND tenant_id = $3
     AND NOT EXISTS (SELECT 1 FROM verity_retry_chain_locked($2, $3) chain WHERE chain.status = 'FAILED'
            AND (chain.acknowledged_at IS NOT NULL
                 OR coalesce(chain.obligation, '{}'::jsonb) ? 'effect_shown_after_failed')) RETURNING id;

-- refutedRetries
WITH RECURSIVE up AS (
       SELECT ro.id, ro.retry_of, ro.status, ro.acknowledged_at, ro.obligation
       FROM operations o JOIN operations ro ON ro.id = o.retry_of AND ro.tenant_id = $1
       WHERE o.tenant_id = $1 AND o.id = ANY($2::text[])
       UNION
       SELECT ro.id, ro.retry_of, ro.status, ro.acknowledged_at, ro.obligation
       FROM operations ro JOIN up c ON ro.id = c.retry_of AND ro.tenant_id = $1),
     down AS (
       SELECT o.id FROM up chain JOIN operations o ON o.retry_of = chain.id AND o.tenant_id = $1
       WHERE chain.status = 'FAILED'
            AND (chain.acknowledged_at IS NOT NULL
                 OR coalesce(chain.obligation, '{}'::jsonb) ? 'effect_shown_after_failed')
       UNION
       SELECT o.id FROM down d JOIN operations o ON o.retry_of = d.id AND o.tenant_id = $1)
     SELECT o.id FROM operations o WHERE o.tenant_id = $1 AND o.id = ANY($2::text[])
       AND o.retry_of IS NOT NULL AND o.id IN (SELECT id FROM down);

-- executionsOfWaitingRetries
WITH RECURSIVE down AS (
       SELECT o.id, o.execution_id, o.status FROM operations o WHERE o.retry_of = $1 AND o.tenant_id = $2
       UNION
       SELECT o.id, o.execution_id, o.status FROM operations o JOIN down d ON o.retry_of = d.id AND o.tenant_id = $2)
     SELECT DISTINCT execution_id FROM down WHERE status = 'PREPARED' ORDER BY execution_id;

-- retryOf
SELECT id, execution_id FROM operations WHERE retry_of = $1 AND tenant_id = $2;

-- retryChains
WITH RECURSIVE chain AS (
       SELECT r.id AS root, 0 AS depth, r.id, r.retry_of, r.execution_id, r.status, r.terminal_reason,
              coalesce(r.approval->>'state' = 'denied', false) AS denied
       FROM operations r WHERE r.tenant_id = $1 AND r.id = ANY($2::text[])
       UNION ALL
       SELECT c.root, c.depth + 1, o.id, o.retry_of, o.execution_id, o.status, o.terminal_reason,
              coalesce(o.approval->>'state' = 'denied', false)
       FROM chain c JOIN operations o ON o.id = c.retry_of AND o.tenant_id = $1
       WHERE c.depth < $3),
     counted AS (
       SELECT c.*, count(*) FILTER (WHERE c.denied) OVER (PARTITION BY c.root) AS denials,
              bool_or(c.depth = $3 AND c.retry_of IS NOT NULL) OVER (PARTITION BY c.root) AS uncounted,
              row_number() OVER (PARTITION BY c.root, c.denied ORDER BY c.depth) AS nth
       FROM chain c)
     SELECT c.root, c.depth, c.id, c.execution_id, c.status, c.terminal_reason, c.denied,
            a.approval->>'decided_by' AS decided_by, a.approval->>'decided_at' AS decided_at,
            a.approval->>'reason' AS reason, c.denials, c.uncounted
     FROM counted c LEFT JOIN operations a ON c.denied AND a.id = c.id AND a.tenant_id = $1
     WHERE c.depth <= 10 OR (c.denied AND c.nth <= 3)
     ORDER BY c.root, c.depth;

-- unsettledResendOf
SELECT o.id, o.execution_id, o.key, o.status FROM operations o
     WHERE o.tenant_id = $1 AND o.connector = $2 AND o.resend_ref = $3 AND o.resend_ref IS NOT NULL AND o.id <> $4
       AND o.status IN ('SENT', 'UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW') AND o.attempt > 0
     ORDER BY o.id LIMIT 1;

-- lockRetried
SELECT status, acknowledged_at, provider_ref FROM operations WHERE id = $1 AND tenant_id = $2
     FOR NO KEY UPDATE;

-- readsAfterFailed
SELECT data->>'result' AS result, data->'evidence' AS evidence FROM events
     WHERE operation_id = $1 AND tenant_id = $2 AND type = 'operation.rechecked'
       AND data->>'after' = 'FAILED'
     ORDER BY seq;
