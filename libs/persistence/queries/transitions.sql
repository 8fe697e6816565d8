-- operationMove
WITH moved AS (
         UPDATE operations op SET status = $3, updated_at = clock_timestamp(), evidence = $5, terminal_reason = $6
         WHERE op.id = $1 AND op.status = $2 AND op.attempt = $4
         RETURNING op.id, op.execution_id, op.tenant_id, op.attempt, op.created_at, op.terminal_reason
       ), seq AS (
         UPDATE executions e SET event_seq = e.event_seq + 1, updated_at = clock_timestamp()
         FROM moved WHERE e.id = moved.execution_id
         RETURNING e.id, e.event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, from_status, to_status, data)
       SELECT $7, seq.id, moved.tenant_id, seq.event_seq, moved.id, $8, $2, $3, $9::jsonb || jsonb_build_object('reason', moved.terminal_reason)
       FROM moved JOIN seq ON seq.id = moved.execution_id
       RETURNING id, seq, execution_id, (SELECT attempt FROM moved) AS attempt,
                 (SELECT extract(epoch FROM clock_timestamp() - created_at)::float8 FROM moved) AS age_s;

-- operationSendGuarded
WITH stamp AS MATERIALIZED (
         SELECT clock_timestamp() AS at FROM (SELECT 1 FROM operations so JOIN executions se ON se.id = so.execution_id
         WHERE so.id = $1 FOR NO KEY UPDATE OF so, se) locked), moved AS (
         UPDATE operations op SET status = $3, updated_at = (SELECT at FROM stamp), attempt = attempt + 1, sent_at = (SELECT at FROM stamp), check_count = $5, next_check_at = $6, terminal_reason = $7
         WHERE op.id = $1 AND op.status = $2 AND op.attempt = $4 AND CASE WHEN (EXISTS (SELECT 1 FROM executions ge WHERE ge.id = op.execution_id
                    AND ge.status IN ('running'))) AND (op.next_check_at IS NULL) AND (op.resend_ref IS NULL OR NOT EXISTS (SELECT 1 FROM operations ro WHERE ro.tenant_id = op.tenant_id
          AND ro.connector = op.connector AND ro.resend_ref = op.resend_ref AND ro.resend_ref IS NOT NULL
          AND ro.id <> op.id AND ro.status IN ('SENT', 'UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW') AND ro.attempt > 0)) AND (NOT EXISTS (
              SELECT 1 FROM unnest(op.depends_on) AS dep(key)
              WHERE NOT coalesce((
                SELECT (d.status IN ('VERIFIED') AND d.rejected_at IS NULL)
                       OR (d.status IN ('ACKNOWLEDGED')
                           AND d.verification_method <> 'read_after_write')
                FROM operations d WHERE d.execution_id = op.execution_id AND d.key = dep.key
                ORDER BY d.generation DESC LIMIT 1 FOR SHARE), false))) AND (op.approval->>'state' IS DISTINCT FROM 'granted' OR op.approval->>'decided_by' IS NULL
        OR EXISTS (SELECT 1 FROM api_keys gk WHERE gk.id = op.approval->>'decided_by' AND gk.tenant_id = op.tenant_id
                   AND gk.revoked_at IS NULL FOR SHARE)) AND (op.retry_of IS NULL OR NOT EXISTS (SELECT 1 FROM verity_retry_chain_locked(op.retry_of, op.tenant_id) chain WHERE chain.status = 'FAILED'
            AND (chain.acknowledged_at IS NOT NULL
                 OR coalesce(chain.obligation, '{}'::jsonb) ? 'effect_shown_after_failed'))) AND (op.approval->>'state' IS NOT NULL OR op.requires_approval
            OR (SELECT CASE WHEN gt.id IS NOT NULL THEN jsonb_build_object('approvalRules', gt.settings->'approvalRules', 'approvalAmountAbove', gt.settings->'approvalAmountAbove')::text END FROM tenants gt WHERE gt.id = op.tenant_id FOR SHARE)
               IS NOT DISTINCT FROM $9::text) AND (verity_settings_version_locked(op.tenant_id, op.connector) IS NOT DISTINCT FROM $8::text) AND (EXISTS (SELECT 1 FROM executions ge WHERE ge.id = op.execution_id AND ge.deadline_at > clock_timestamp())) AND (CASE WHEN op.approval->>'state' IS NULL THEN NOT ($10::boolean OR op.requires_approval)
               ELSE op.approval->>'state' = 'granted'
                    AND (op.approval->>'expires_at' IS NULL
                         OR (op.approval->>'expires_at')::timestamptz > clock_timestamp()) END) THEN (EXISTS (SELECT 1 FROM executions ge WHERE ge.id = op.execution_id AND ge.deadline_at > (SELECT at FROM stamp))) AND (CASE WHEN op.approval->>'state' IS NULL THEN NOT ($10::boolean OR op.requires_approval)
               ELSE op.approval->>'state' = 'granted'
                    AND (op.approval->>'expires_at' IS NULL
                         OR (op.approval->>'expires_at')::timestamptz > (SELECT at FROM stamp)) END) ELSE false END
         RETURNING op.id, op.execution_id, op.tenant_id, op.attempt, op.created_at, op.terminal_reason
       ), seq AS (
         UPDATE executions e SET event_seq = e.event_seq + 1, updated_at = clock_timestamp()
         FROM moved WHERE e.id = moved.execution_id
         RETURNING e.id, e.event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, from_status, to_status, data)
       SELECT $11, seq.id, moved.tenant_id, seq.event_seq, moved.id, $12, $2, $3, $13::jsonb || jsonb_build_object('reason', moved.terminal_reason)
       FROM moved JOIN seq ON seq.id = moved.execution_id
       RETURNING id, seq, execution_id, (SELECT attempt FROM moved) AS attempt,
                 (SELECT extract(epoch FROM clock_timestamp() - created_at)::float8 FROM moved) AS age_s;

-- operationMoveThenExecution
WITH moved AS (
         UPDATE operations op SET status = $3, updated_at = clock_timestamp(), evidence = $5, terminal_reason = $6
         WHERE op.id = $1 AND op.status = $2 AND op.attempt = $4
         RETURNING op.id, op.execution_id, op.tenant_id, op.attempt, op.created_at, op.terminal_reason
       ), follows AS (
         SELECT e.id, (e.status = $10 AND e.deadline_at > clock_timestamp()) AS moves
         FROM executions e JOIN moved ON e.id = moved.execution_id
         FOR NO KEY UPDATE OF e
       ), seq AS (
         UPDATE executions e SET event_seq = e.event_seq + 1 + CASE WHEN follows.moves THEN $12::int ELSE 0 END,
                status = CASE WHEN follows.moves THEN $11 ELSE e.status END, updated_at = clock_timestamp()
         FROM follows WHERE e.id = follows.id
         RETURNING e.id, e.event_seq, follows.moves
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, from_status, to_status, data)
       SELECT $7, seq.id, moved.tenant_id, seq.event_seq - CASE WHEN seq.moves THEN $12::int ELSE 0 END, moved.id, $8, $2::text,
              $3::text, ($9::jsonb || jsonb_build_object('reason', moved.terminal_reason))::jsonb
       FROM moved JOIN seq ON seq.id = moved.execution_id
       UNION ALL
       SELECT m.event_id, seq.id, moved.tenant_id, seq.event_seq - $12::int + m.ord, NULL, 'execution.status_changed',
              m.from_status, m.to_status, m.data
       FROM moved JOIN seq ON seq.id = moved.execution_id AND seq.moves,
            unnest($13::text[], $14::text[], $15::text[], $16::jsonb[])
            WITH ORDINALITY AS m(event_id, from_status, to_status, data, ord)
       RETURNING id, seq, execution_id, operation_id, (SELECT attempt FROM moved) AS attempt,
                 (SELECT extract(epoch FROM clock_timestamp() - created_at)::float8 FROM moved) AS age_s;

-- executionMovesThenSend
WITH stamp AS MATERIALIZED (
         SELECT clock_timestamp() AS at FROM (SELECT 1 FROM operations so JOIN executions se ON se.id = so.execution_id
         WHERE so.id = $1 FOR NO KEY UPDATE OF so, se) locked), moved AS (
         UPDATE operations op SET status = $3, updated_at = (SELECT at FROM stamp), attempt = attempt + 1, sent_at = (SELECT at FROM stamp), check_count = $5, next_check_at = $6, terminal_reason = $7
         WHERE op.id = $1 AND op.status = $2 AND op.attempt = $4 AND CASE WHEN (EXISTS (SELECT 1 FROM executions ge WHERE ge.id = op.execution_id
                    AND ge.status IN ('running', 'created'))) AND (op.next_check_at IS NULL) AND (op.resend_ref IS NULL OR NOT EXISTS (SELECT 1 FROM operations ro WHERE ro.tenant_id = op.tenant_id
          AND ro.connector = op.connector AND ro.resend_ref = op.resend_ref AND ro.resend_ref IS NOT NULL
          AND ro.id <> op.id AND ro.status IN ('SENT', 'UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW') AND ro.attempt > 0)) AND (NOT EXISTS (
              SELECT 1 FROM unnest(op.depends_on) AS dep(key)
              WHERE NOT coalesce((
                SELECT (d.status IN ('VERIFIED') AND d.rejected_at IS NULL)
                       OR (d.status IN ('ACKNOWLEDGED')
                           AND d.verification_method <> 'read_after_write')
                FROM operations d WHERE d.execution_id = op.execution_id AND d.key = dep.key
                ORDER BY d.generation DESC LIMIT 1 FOR SHARE), false))) AND (op.approval->>'state' IS DISTINCT FROM 'granted' OR op.approval->>'decided_by' IS NULL
        OR EXISTS (SELECT 1 FROM api_keys gk WHERE gk.id = op.approval->>'decided_by' AND gk.tenant_id = op.tenant_id
                   AND gk.revoked_at IS NULL FOR SHARE)) AND (op.retry_of IS NULL OR NOT EXISTS (SELECT 1 FROM verity_retry_chain_locked(op.retry_of, op.tenant_id) chain WHERE chain.status = 'FAILED'
            AND (chain.acknowledged_at IS NOT NULL
                 OR coalesce(chain.obligation, '{}'::jsonb) ? 'effect_shown_after_failed'))) AND (op.approval->>'state' IS NOT NULL OR op.requires_approval
            OR (SELECT CASE WHEN gt.id IS NOT NULL THEN jsonb_build_object('approvalRules', gt.settings->'approvalRules', 'approvalAmountAbove', gt.settings->'approvalAmountAbove')::text END FROM tenants gt WHERE gt.id = op.tenant_id FOR SHARE)
               IS NOT DISTINCT FROM $9::text) AND (verity_settings_version_locked(op.tenant_id, op.connector) IS NOT DISTINCT FROM $8::text) AND (EXISTS (SELECT 1 FROM executions ge WHERE ge.id = op.execution_id AND ge.deadline_at > clock_timestamp())) AND (CASE WHEN op.approval->>'state' IS NULL THEN NOT ($10::boolean OR op.requires_approval)
               ELSE op.approval->>'state' = 'granted'
                    AND (op.approval->>'expires_at' IS NULL
                         OR (op.approval->>'expires_at')::timestamptz > clock_timestamp()) END) THEN (EXISTS (SELECT 1 FROM executions ge WHERE ge.id = op.execution_id AND ge.deadline_at > (SELECT at FROM stamp))) AND (CASE WHEN op.approval->>'state' IS NULL THEN NOT ($10::boolean OR op.requires_approval)
               ELSE op.approval->>'state' = 'granted'
                    AND (op.approval->>'expires_at' IS NULL
                         OR (op.approval->>'expires_at')::timestamptz > (SELECT at FROM stamp)) END) ELSE false END
         RETURNING op.id, op.execution_id, op.tenant_id, op.attempt, op.created_at, op.terminal_reason
       ), follows AS (
         SELECT e.id, e.status = $14 AS moves
         FROM executions e JOIN moved ON e.id = moved.execution_id
         FOR NO KEY UPDATE OF e
       ), seq AS (
         UPDATE executions e SET event_seq = e.event_seq + 1 + CASE WHEN follows.moves THEN $16::int ELSE 0 END,
                status = CASE WHEN follows.moves THEN $15 ELSE e.status END, updated_at = clock_timestamp()
         FROM follows WHERE e.id = follows.id
         RETURNING e.id, e.event_seq, follows.moves
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, from_status, to_status, data)
       SELECT m.event_id, seq.id, moved.tenant_id, seq.event_seq - 1 - $16::int + m.ord, NULL, 'execution.status_changed',
              m.from_status, m.to_status, m.data
       FROM moved JOIN seq ON seq.id = moved.execution_id AND seq.moves,
            unnest($17::text[], $18::text[], $19::text[], $20::jsonb[])
            WITH ORDINALITY AS m(event_id, from_status, to_status, data, ord)
       UNION ALL
       SELECT $11, seq.id, moved.tenant_id, seq.event_seq, moved.id, $12, $2::text,
              $3::text, ($13::jsonb || jsonb_build_object('reason', moved.terminal_reason))::jsonb
       FROM moved JOIN seq ON seq.id = moved.execution_id
       RETURNING id, seq, execution_id, operation_id, (SELECT attempt FROM moved) AS attempt,
                 (SELECT extract(epoch FROM clock_timestamp() - created_at)::float8 FROM moved) AS age_s;

-- decisionWithMove
WITH moved AS (
         UPDATE operations SET updated_at = clock_timestamp(), approval = coalesce(approval, '{}'::jsonb) || $5::jsonb, status = $7, terminal_reason = $8
         WHERE id = $1 AND tenant_id = $2 AND status = $3 AND attempt = $4 AND coalesce(approval->>'state', '') NOT IN ('granted', 'denied') AND (EXISTS (SELECT 1 FROM api_keys k WHERE k.id = $6 AND k.tenant_id = $2 AND k.revoked_at IS NULL FOR SHARE))
         RETURNING id, execution_id, tenant_id, created_at, terminal_reason
       ), seq AS (
         UPDATE executions e SET event_seq = e.event_seq + $14::int, updated_at = clock_timestamp()
         FROM moved WHERE e.id = moved.execution_id
         RETURNING e.id, e.event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, from_status, to_status, data)
       SELECT m.event_id, seq.id, moved.tenant_id, seq.event_seq - $14::int + m.ord, moved.id, m.type,
              m.from_status, m.to_status, CASE WHEN m.to_status IS NULL THEN m.data ELSE (m.data) || jsonb_build_object('reason', moved.terminal_reason) END
       FROM moved JOIN seq ON seq.id = moved.execution_id,
            unnest($9::text[], $10::text[], $11::text[], $12::text[],
                   $13::jsonb[]) WITH ORDINALITY AS m(event_id, type, from_status, to_status, data, ord)
       ORDER BY m.ord
       RETURNING id, seq, execution_id,
                 (SELECT extract(epoch FROM clock_timestamp() - created_at)::float8 FROM moved) AS age_s;

-- resolutionVerified
WITH moved AS (
         UPDATE operations SET updated_at = clock_timestamp(), evidence = coalesce(evidence, '{}'::jsonb) || $5::jsonb, obligation = coalesce(obligation, '{}'::jsonb) || $6::jsonb, status = $9, terminal_reason = $10
         WHERE id = $1 AND tenant_id = $2 AND status = $3 AND attempt = $4 AND obligation->'resolution' IS NULL AND rejected_at IS NULL AND (EXISTS (SELECT 1 FROM api_keys k WHERE k.id = $7 AND k.tenant_id = $2 AND k.revoked_at IS NULL FOR SHARE)) AND coalesce(jsonb_array_length(obligation->'investigations'), 0) = $8
         RETURNING id, execution_id, tenant_id, created_at, terminal_reason
       ), seq AS (
         UPDATE executions e SET event_seq = e.event_seq + $16::int, updated_at = clock_timestamp()
         FROM moved WHERE e.id = moved.execution_id
         RETURNING e.id, e.event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, from_status, to_status, data)
       SELECT m.event_id, seq.id, moved.tenant_id, seq.event_seq - $16::int + m.ord, moved.id, m.type,
              m.from_status, m.to_status, CASE WHEN m.to_status IS NULL THEN m.data ELSE (m.data) || jsonb_build_object('reason', moved.terminal_reason) END
       FROM moved JOIN seq ON seq.id = moved.execution_id,
            unnest($11::text[], $12::text[], $13::text[], $14::text[],
                   $15::jsonb[]) WITH ORDINALITY AS m(event_id, type, from_status, to_status, data, ord)
       ORDER BY m.ord
       RETURNING id, seq, execution_id,
                 (SELECT extract(epoch FROM clock_timestamp() - created_at)::float8 FROM moved) AS age_s;

-- resolutionReleased
WITH stamp AS MATERIALIZED (
         SELECT clock_timestamp() AS at FROM (SELECT 1 FROM operations so JOIN executions se ON se.id = so.execution_id
         WHERE so.id = $1 FOR NO KEY UPDATE OF so, se) locked), moved AS (
         UPDATE operations SET updated_at = (SELECT at FROM stamp), obligation = jsonb_set(coalesce(obligation, '{}'::jsonb) || $5::jsonb, '{resolution,at}', to_jsonb(to_char(((SELECT at FROM stamp)) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
         WHERE id = $1 AND tenant_id = $2 AND status = $3 AND attempt = $4 AND obligation->'resolution' IS NULL AND CASE WHEN (EXISTS (SELECT 1 FROM api_keys k WHERE k.id = $6 AND k.tenant_id = $2 AND k.revoked_at IS NULL FOR SHARE)) AND (EXISTS (SELECT 1 FROM executions ge WHERE ge.id = operations.execution_id
                    AND ge.status IN ('created', 'validating', 'resolving_context', 'planning', 'running', 'waiting_for_tool', 'waiting_for_approval', 'validating_output', 'completed')
                    AND (ge.status IN ('completed', 'failed', 'cancelled', 'expired') OR ge.deadline_at > clock_timestamp()))) THEN (EXISTS (SELECT 1 FROM executions ge WHERE ge.id = operations.execution_id
                    AND ge.status IN ('created', 'validating', 'resolving_context', 'planning', 'running', 'waiting_for_tool', 'waiting_for_approval', 'validating_output', 'completed')
                    AND (ge.status IN ('completed', 'failed', 'cancelled', 'expired') OR ge.deadline_at > (SELECT at FROM stamp)))) ELSE false END AND coalesce(jsonb_array_length(obligation->'investigations'), 0) = $7
         RETURNING id, execution_id, tenant_id, created_at, terminal_reason
       ), seq AS (
         UPDATE executions e SET event_seq = e.event_seq + $13::int, updated_at = clock_timestamp()
         FROM moved WHERE e.id = moved.execution_id
         RETURNING e.id, e.event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, from_status, to_status, data, created_at)
       SELECT m.event_id, seq.id, moved.tenant_id, seq.event_seq - $13::int + m.ord, moved.id, m.type,
              m.from_status, m.to_status, CASE WHEN m.ord = 1 THEN jsonb_set(m.data, '{at}', to_jsonb(to_char(((SELECT at FROM stamp)) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
              WHEN jsonb_typeof(m.data->'resolution') = 'object' THEN jsonb_set(m.data, '{resolution,at}', to_jsonb(to_char(((SELECT at FROM stamp)) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
              ELSE m.data END, (SELECT at FROM stamp)
       FROM moved JOIN seq ON seq.id = moved.execution_id,
            unnest($8::text[], $9::text[], $10::text[], $11::text[],
                   $12::jsonb[]) WITH ORDINALITY AS m(event_id, type, from_status, to_status, data, ord)
       ORDER BY m.ord
       RETURNING id, seq, execution_id,
                 (SELECT extract(epoch FROM clock_timestamp() - created_at)::float8 FROM moved) AS age_s;

-- stillUnknown
WITH moved AS (
         UPDATE operations SET updated_at = clock_timestamp(), obligation = coalesce(obligation, '{}'::jsonb) || $5::jsonb
         WHERE id = $1 AND tenant_id = $2 AND status = $3 AND attempt = $4 AND obligation->'resolution' IS NULL AND (EXISTS (SELECT 1 FROM api_keys k WHERE k.id = $6 AND k.tenant_id = $2 AND k.revoked_at IS NULL FOR SHARE)) AND coalesce(jsonb_array_length(obligation->'investigations'), 0) = $7 AND coalesce((SELECT sum(octet_length(i->>'evidence')) FROM jsonb_array_elements(obligation->'investigations') i), 0) + $8::int <= $9::int
         RETURNING id, execution_id, tenant_id, created_at, terminal_reason
       ), seq AS (
         UPDATE executions e SET event_seq = e.event_seq + $15::int, updated_at = clock_timestamp()
         FROM moved WHERE e.id = moved.execution_id
         RETURNING e.id, e.event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, from_status, to_status, data)
       SELECT m.event_id, seq.id, moved.tenant_id, seq.event_seq - $15::int + m.ord, moved.id, m.type,
              m.from_status, m.to_status, m.data
       FROM moved JOIN seq ON seq.id = moved.execution_id,
            unnest($10::text[], $11::text[], $12::text[], $13::text[],
                   $14::jsonb[]) WITH ORDINALITY AS m(event_id, type, from_status, to_status, data, ord)
       ORDER BY m.ord
       RETURNING id, seq, execution_id,
                 (SELECT extract(epoch FROM clock_timestamp() - created_at)::float8 FROM moved) AS age_s;

-- decisionAtVersion
SELECT 1 FROM tenants WHERE id = $1 FOR SHARE;

WITH moved AS (
         UPDATE operations SET updated_at = clock_timestamp(), approval = coalesce(approval, '{}'::jsonb) || $5::jsonb
         WHERE id = $1 AND tenant_id = $2 AND status = $3 AND attempt = $4 AND coalesce(approval->>'state', '') NOT IN ('granted', 'denied') AND (EXISTS (SELECT 1 FROM api_keys k WHERE k.id = $6 AND k.tenant_id = $2 AND k.revoked_at IS NULL FOR SHARE)) AND (md5(jsonb_build_array(operations.status, operations.terminal_reason, operations.attempt, operations.approval,
       operations.obligation - 'rechecks' - 'escalated_at', operations.evidence,
       operations.acknowledged_at IS NOT NULL, operations.rejected_at IS NOT NULL)::text
       || CASE WHEN EXISTS (SELECT 1 FROM verity_retry_chain_locked(operations.retry_of, operations.tenant_id) chain WHERE chain.status = 'FAILED'
            AND (chain.acknowledged_at IS NOT NULL
                 OR coalesce(chain.obligation, '{}'::jsonb) ? 'effect_shown_after_failed')) THEN ' retry_refuted' ELSE '' END
       || CASE WHEN coalesce(operations.approval, 'null'::jsonb) = 'null'::jsonb AND NOT operations.requires_approval
          AND (operations.status = 'PREPARED'
               OR (operations.status = 'MANUAL_REVIEW' AND operations.attempt = 0)) THEN ' approval_policy ' || coalesce((SELECT CASE WHEN vt.id IS NOT NULL THEN jsonb_build_object('approvalRules', vt.settings->'approvalRules', 'approvalAmountAbove', vt.settings->'approvalAmountAbove')::text END FROM tenants vt WHERE vt.id = operations.tenant_id FOR SHARE), '') ELSE '' END) = ANY($7::text[]))
         RETURNING id, execution_id, tenant_id, created_at, terminal_reason
       ), seq AS (
         UPDATE executions e SET event_seq = e.event_seq + $13::int, updated_at = clock_timestamp()
         FROM moved WHERE e.id = moved.execution_id
         RETURNING e.id, e.event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, from_status, to_status, data)
       SELECT m.event_id, seq.id, moved.tenant_id, seq.event_seq - $13::int + m.ord, moved.id, m.type,
              m.from_status, m.to_status, m.data
       FROM moved JOIN seq ON seq.id = moved.execution_id,
            unnest($8::text[], $9::text[], $10::text[], $11::text[],
                   $12::jsonb[]) WITH ORDINALITY AS m(event_id, type, from_status, to_status, data, ord)
       ORDER BY m.ord
       RETURNING id, seq, execution_id,
                 (SELECT extract(epoch FROM clock_timestamp() - created_at)::float8 FROM moved) AS age_s;

-- lateRejection
WITH stamp AS MATERIALIZED (
         SELECT clock_timestamp() AS at FROM (SELECT 1 FROM operations so JOIN executions se ON se.id = so.execution_id
         WHERE so.id = $1 FOR NO KEY UPDATE OF so, se) locked), moved AS (
         UPDATE operations SET updated_at = (SELECT at FROM stamp), rejected_at = (SELECT at FROM stamp), rejection = $3 WHERE id = $1 AND status = ANY($2::text[])
         RETURNING id, execution_id, tenant_id
       ), seq AS (
         UPDATE executions e SET event_seq = e.event_seq + 1, updated_at = clock_timestamp()
         FROM moved WHERE e.id = moved.execution_id RETURNING e.id, e.event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, data, created_at)
       SELECT $4, seq.id, moved.tenant_id, seq.event_seq, moved.id, $5, $6, (SELECT at FROM stamp)
       FROM moved JOIN seq ON seq.id = moved.execution_id
       RETURNING id, seq;

-- annotate
WITH moved AS (
         UPDATE operations SET updated_at = clock_timestamp(), obligation = coalesce(obligation, '{}'::jsonb) || $3::jsonb WHERE id = $1 AND status = $2 AND obligation->>'due_at' = $4 AND obligation->>'escalated_at' IS NULL AND obligation->'resolution' IS NULL
         RETURNING id, execution_id, tenant_id
       ), seq AS (
         UPDATE executions e SET event_seq = e.event_seq + 1, updated_at = clock_timestamp()
         FROM moved WHERE e.id = moved.execution_id RETURNING e.id, e.event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, data)
       SELECT $5, seq.id, moved.tenant_id, seq.event_seq, moved.id, $6, $7
       FROM moved JOIN seq ON seq.id = moved.execution_id
       RETURNING id, seq;

-- annotateOncePerOperation
WITH seq AS (
           UPDATE executions SET event_seq = event_seq + 1, updated_at = clock_timestamp() WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM events WHERE operation_id = $3 AND type = $4)
           RETURNING id, tenant_id, event_seq
         )
         INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, data)
         SELECT $2, id, tenant_id, event_seq, $3, $4, $5 FROM seq RETURNING id, seq;

-- operationMoveAtCheckCount
WITH stamp AS MATERIALIZED (
         SELECT clock_timestamp() AS at FROM (SELECT 1 FROM operations so JOIN executions se ON se.id = so.execution_id
         WHERE so.id = $1 FOR NO KEY UPDATE OF so, se) locked), moved AS (
         UPDATE operations op SET status = $3, updated_at = (SELECT at FROM stamp), check_count = $5, next_check_at = (SELECT at FROM stamp) + $6::bigint * interval '1 millisecond'
         WHERE op.id = $1 AND op.status = $2 AND op.attempt = $4 AND op.check_count = $7
         RETURNING op.id, op.execution_id, op.tenant_id, op.attempt, op.created_at, op.terminal_reason
       ), seq AS (
         UPDATE executions e SET event_seq = e.event_seq + 1, updated_at = clock_timestamp()
         FROM moved WHERE e.id = moved.execution_id
         RETURNING e.id, e.event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, from_status, to_status, data)
       SELECT $8, seq.id, moved.tenant_id, seq.event_seq, moved.id, $9, $2, $3, $10::jsonb || jsonb_build_object('reason', moved.terminal_reason)
       FROM moved JOIN seq ON seq.id = moved.execution_id
       RETURNING id, seq, execution_id, (SELECT attempt FROM moved) AS attempt,
                 (SELECT extract(epoch FROM clock_timestamp() - created_at)::float8 FROM moved) AS age_s;

-- annotateAtCheckCount
WITH moved AS (
         UPDATE operations SET updated_at = clock_timestamp(), check_count = $3, next_check_at = $4 WHERE id = $1 AND status = $2 AND check_count = $5
         RETURNING id, execution_id, tenant_id
       ), seq AS (
         UPDATE executions e SET event_seq = e.event_seq + 1, updated_at = clock_timestamp()
         FROM moved WHERE e.id = moved.execution_id RETURNING e.id, e.event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, data)
       SELECT $6, seq.id, moved.tenant_id, seq.event_seq, moved.id, $7, $8
       FROM moved JOIN seq ON seq.id = moved.execution_id
       RETURNING id, seq;

-- annotateCounted
WITH moved AS (
         UPDATE operations SET updated_at = clock_timestamp(), next_check_at = $3, obligation = jsonb_set(coalesce(obligation, '{}'::jsonb) || $4::jsonb, '{rechecks}', to_jsonb(coalesce((obligation->>'rechecks')::int, 0) + 1)) WHERE id = $1 AND status = $2 AND obligation->>'due_at' = $5 AND date_trunc('milliseconds', next_check_at) = $6::timestamptz
         RETURNING id, execution_id, tenant_id
       ), seq AS (
         UPDATE executions e SET event_seq = e.event_seq + 1, updated_at = clock_timestamp()
         FROM moved WHERE e.id = moved.execution_id RETURNING e.id, e.event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, data)
       SELECT $7, seq.id, moved.tenant_id, seq.event_seq, moved.id, $8, $9
       FROM moved JOIN seq ON seq.id = moved.execution_id
       RETURNING id, seq;

-- annotateObserved
WITH moved AS (
         UPDATE operations SET updated_at = clock_timestamp(), observation = $3 WHERE id = $1 AND status = $2 AND date_trunc('milliseconds', updated_at) = $4::timestamptz
         RETURNING id, execution_id, tenant_id
       ), seq AS (
         UPDATE executions e SET event_seq = e.event_seq + 1, updated_at = clock_timestamp()
         FROM moved WHERE e.id = moved.execution_id RETURNING e.id, e.event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, data)
       SELECT $5, seq.id, moved.tenant_id, seq.event_seq, moved.id, $6, $7
       FROM moved JOIN seq ON seq.id = moved.execution_id
       RETURNING id, seq;

-- annotateUnlessShown
WITH moved AS (
         UPDATE operations SET updated_at = clock_timestamp(), obligation = coalesce(obligation, '{}'::jsonb) || $3::jsonb WHERE id = $1 AND status = $2 AND NOT (coalesce(obligation, '{}'::jsonb) ? $4::text)
         RETURNING id, execution_id, tenant_id, next_check_at
       ), seq AS (
         UPDATE executions e SET event_seq = e.event_seq + 1, updated_at = clock_timestamp()
         FROM moved WHERE e.id = moved.execution_id RETURNING e.id, e.event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, data)
       SELECT $5, seq.id, moved.tenant_id, seq.event_seq, moved.id, $6, $7::jsonb || jsonb_build_object('next_check_at', to_char((moved.next_check_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
       FROM moved JOIN seq ON seq.id = moved.execution_id
       RETURNING id, seq;

-- annotateSuperseded
WITH moved AS (
         UPDATE operations SET updated_at = clock_timestamp(), obligation = coalesce(obligation, '{}'::jsonb) || $3::jsonb WHERE id = $1 AND status = $2
         RETURNING id, execution_id, tenant_id, next_check_at
       ), seq AS (
         UPDATE executions e SET event_seq = e.event_seq + 1, updated_at = clock_timestamp()
         FROM moved WHERE e.id = moved.execution_id RETURNING e.id, e.event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, data)
       SELECT $4, seq.id, moved.tenant_id, seq.event_seq, moved.id, $5, $6::jsonb || jsonb_build_object('next_check_at', to_char((moved.next_check_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
       FROM moved JOIN seq ON seq.id = moved.execution_id
       RETURNING id, seq;

-- executionMove
WITH moved AS (
         UPDATE executions SET status = $3, event_seq = event_seq + $4, updated_at = clock_timestamp() WHERE id = $1 AND status = $2
         RETURNING id, tenant_id, event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, from_status, to_status, data)
       SELECT m.event_id, moved.id, moved.tenant_id, moved.event_seq - $4 + m.ord, NULL, 'execution.status_changed',
              m.from_status, m.to_status, m.data
       FROM moved, unnest($5::text[], $6::text[], $7::text[], $8::jsonb[])
            WITH ORDINALITY AS m(event_id, from_status, to_status, data, ord)
       ORDER BY m.ord
       RETURNING id, seq;

-- executionMovesWhileSettingsAt
WITH moved AS (
         UPDATE executions SET status = $3, event_seq = event_seq + $4, updated_at = clock_timestamp() WHERE id = $1 AND status = $2 AND NOT EXISTS (SELECT 1 FROM unnest($5::text[], $6::text[])
           AS read(connector, version)
           WHERE verity_settings_version_locked(executions.tenant_id, read.connector) IS DISTINCT FROM read.version)
         RETURNING id, tenant_id, event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, from_status, to_status, data)
       SELECT m.event_id, moved.id, moved.tenant_id, moved.event_seq - $4 + m.ord, NULL, 'execution.status_changed',
              m.from_status, m.to_status, m.data
       FROM moved, unnest($7::text[], $8::text[], $9::text[], $10::jsonb[])
            WITH ORDINALITY AS m(event_id, from_status, to_status, data, ord)
       ORDER BY m.ord
       RETURNING id, seq;

-- recordOutcome
WITH moved AS (
         UPDATE executions SET criteria_results = $3, outcome = $4, event_seq = event_seq + 1,
                updated_at = clock_timestamp()
         WHERE id = $1 AND criteria_results IS NOT DISTINCT FROM $2::jsonb
         RETURNING id, tenant_id, event_seq
       )
       INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, data)
       SELECT $5, id, tenant_id, event_seq, NULL, 'outcome.evaluated', $6 FROM moved RETURNING id, seq;
