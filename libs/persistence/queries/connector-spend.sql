-- lockOperation
SELECT 1 FROM operations WHERE id = $1 FOR UPDATE;

-- lockExecutionOfOperation
SELECT 1 FROM executions
     WHERE id = (SELECT execution_id FROM operations WHERE id = $1) FOR NO KEY UPDATE;

-- settingsOf
SELECT s.allow_hosts, s.spending_caps, s.read_back_binding,
            CASE WHEN $3 THEN (SELECT jsonb_object_agg(x.name, x.value) FROM tenant_connector_secrets x
                               WHERE x.tenant_id = $1 AND x.connector = $2) END AS secrets
     FROM (SELECT 1) one
     LEFT JOIN tenant_connector_settings s ON s.tenant_id = $1 AND s.connector = $2;

-- secretsOfTenant
SELECT connector, name, value FROM tenant_connector_secrets
     WHERE tenant_id = $1 AND connector = ANY($2::text[]);

-- amountCaps
SELECT connector, spending_caps FROM tenant_connector_settings
     WHERE tenant_id = $1 AND connector = ANY($2::text[]) AND spending_caps <> '[]'::jsonb;

-- usage
SELECT count(*) AS operations,
            sum(CASE WHEN NOT (o.status = ANY($5::text[]) AND o.acknowledged_at IS NULL
                 AND NOT (coalesce(o.obligation, '{}'::jsonb) ? 'effect_shown_after_failed')) THEN greatest(greatest(CASE WHEN jsonb_typeof(o.evidence->'record' #> $4::text[]) = 'number'
                 THEN verity_amount_of(o.evidence->'record' #> $4::text[]) END,
            coalesce((s.amounts->>$6::text)::numeric, verity_amount_of(o.params #> $4::text[]))), 0) END) AS amount,
            now() - make_interval(secs => $3) AS since
     FROM connector_spend s JOIN operations o ON o.id = s.operation_id
     WHERE s.tenant_id = $1 AND s.connector = $2 AND s.spent_at >= now() - make_interval(secs => $3);

-- amountBeyond
SELECT coalesce(sum(CASE WHEN NOT (o.status = ANY($7::text[]) AND o.acknowledged_at IS NULL
                 AND NOT (coalesce(o.obligation, '{}'::jsonb) ? 'effect_shown_after_failed')) THEN greatest(greatest(CASE WHEN jsonb_typeof(o.evidence->'record' #> $4::text[]) = 'number'
                 THEN verity_amount_of(o.evidence->'record' #> $4::text[]) END,
            coalesce((s.amounts->>$8::text)::numeric, verity_amount_of(o.params #> $4::text[]))), 0) END), 0)
            + $5::numeric > $6::numeric AS beyond
     FROM connector_spend s JOIN operations o ON o.id = s.operation_id
     WHERE s.tenant_id = $1 AND s.connector = $2 AND s.spent_at >= now() - make_interval(secs => $3);

-- capLock
SELECT pg_advisory_xact_lock(727002, hashtext($1));

-- readBackLock
SELECT pg_advisory_xact_lock_shared(727002, hashtext($1));

-- capsChangeLock
SELECT pg_advisory_xact_lock(727003, hashtext($1));

-- resendLock
SELECT pg_advisory_xact_lock(hashtextextended('resend_ref' || chr(31) || $1 || chr(31) || $2 || chr(31) || $3, 0));

-- recordSpend
INSERT INTO connector_spend (operation_id, tenant_id, connector, amounts) VALUES ($1, $2, $3, $4::jsonb)
         ON CONFLICT (operation_id) DO NOTHING;

-- backfill
INSERT INTO connector_spend (operation_id, tenant_id, connector, spent_at)
     SELECT id, tenant_id, connector, sent_at FROM operations
     WHERE tenant_id = $1 AND connector = $2 AND attempt > 0
       AND sent_at >= greatest(now() - make_interval(secs => $3), $4::timestamptz - interval '1 minute')
     ON CONFLICT (operation_id) DO NOTHING;

-- mark
SELECT clock_timestamp() AS at;

-- prefillRead
SELECT id FROM operations
     WHERE tenant_id = $1 AND connector = $2 AND attempt > 0 AND sent_at >= now() - make_interval(secs => $3);

-- prefillWrite
INSERT INTO connector_spend (operation_id, tenant_id, connector, spent_at)
     SELECT o.id, o.tenant_id, o.connector, o.sent_at FROM unnest($3::text[]) AS u(id)
       JOIN operations o ON o.id = u.id AND o.tenant_id = $1 AND o.connector = $2 AND o.attempt > 0
     ON CONFLICT (operation_id) DO NOTHING;

-- prune
DELETE FROM connector_spend WHERE operation_id IN (
       SELECT operation_id FROM connector_spend WHERE spent_at < now() - make_interval(secs => $1)
       ORDER BY spent_at LIMIT $2
     ) RETURNING operation_id;
