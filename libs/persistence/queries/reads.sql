-- databaseNow
SELECT clock_timestamp() AS now;

-- executionById
SELECT {columns:Execution t} FROM executions t WHERE t.id = $1 AND t.tenant_id = $2;

-- executionByIdWithSecretsHeld
SELECT r.*, h.holds_secrets
     FROM (SELECT EXISTS (SELECT 1 FROM tenant_connector_secrets x
                           WHERE x.tenant_id = $2 AND x.connector = ANY($3::text[])) AS holds_secrets) h
     LEFT JOIN LATERAL (SELECT {columns:Execution t} FROM executions t WHERE t.id = $1 AND t.tenant_id = $2) r ON true;

-- executionWithBytesByIdWithSecretsHeld
SELECT r.*, h.holds_secrets
     FROM (SELECT EXISTS (SELECT 1 FROM tenant_connector_secrets x
                           WHERE x.tenant_id = $2 AND x.connector = ANY($3::text[])) AS holds_secrets) h
     LEFT JOIN LATERAL (SELECT {columns:Execution e}, (octet_length(e::text) + coalesce((SELECT sum(octet_length(o::text)) FROM operations o
                                       WHERE o.execution_id = e.id AND o.tenant_id = e.tenant_id), 0))::float8 AS answer_bytes FROM executions e
     WHERE e.id = $1 AND e.tenant_id = $2) r ON true;

-- executionByIdForWorker
SELECT {columns:Execution t} FROM executions t WHERE t.id = $1;

-- executionWithOperations
SELECT {columns:Execution e e__}, {columns:Operation o o__}, clock_timestamp() AS database_now
     FROM executions e LEFT JOIN operations o ON o.execution_id = e.id
     WHERE e.id = $1 AND e.tenant_id = $2 ORDER BY o.position, o.generation;

-- executionWithOperationsForWorker
SELECT {columns:Execution e e__}, {columns:Operation o o__}, {columns:Tenant t t__},
            clock_timestamp() AS database_now,
            CASE WHEN t.id IS NOT NULL THEN jsonb_build_object('approvalRules', t.settings->'approvalRules', 'approvalAmountAbove', t.settings->'approvalAmountAbove')::text END AS t__approval_policy, s.allow_hosts AS s__allow_hosts, s.spending_caps AS s__spending_caps,
            s.read_back_binding AS s__read_back_binding, (extract(epoch FROM s.updated_at) * 1000000)::bigint::text AS s__version,
            CASE WHEN o.connector = ANY($2::text[]) THEN (SELECT jsonb_object_agg(x.name, x.value)
              FROM tenant_connector_secrets x WHERE x.tenant_id = o.tenant_id AND x.connector = o.connector) END AS s__secrets
     FROM executions e LEFT JOIN operations o ON o.execution_id = e.id LEFT JOIN tenants t ON t.id = e.tenant_id
     LEFT JOIN tenant_connector_settings s ON s.tenant_id = o.tenant_id AND s.connector = o.connector
     WHERE e.id = $1 ORDER BY o.position, o.generation;

-- operationToSendForWorker
SELECT {columns:Operation o o__}, e.status AS e__status, e.deadline_at AS e__deadline_at,
            clock_timestamp() AS database_now,
            {columns:Tenant t t__}, CASE WHEN t.id IS NOT NULL THEN jsonb_build_object('approvalRules', t.settings->'approvalRules', 'approvalAmountAbove', t.settings->'approvalAmountAbove')::text END AS t__approval_policy, s.allow_hosts AS s__allow_hosts,
            s.spending_caps AS s__spending_caps, s.read_back_binding AS s__read_back_binding, (extract(epoch FROM s.updated_at) * 1000000)::bigint::text AS s__version,
            CASE WHEN o.connector = ANY($2::text[]) THEN (SELECT jsonb_object_agg(x.name, x.value)
              FROM tenant_connector_secrets x WHERE x.tenant_id = o.tenant_id AND x.connector = o.connector) END AS s__secrets
     FROM operations o JOIN executions e ON e.id = o.execution_id LEFT JOIN tenants t ON t.id = o.tenant_id
     LEFT JOIN tenant_connector_settings s ON s.tenant_id = o.tenant_id AND s.connector = o.connector
     WHERE o.id = $1;

-- operationsOfExecution
SELECT {columns:Operation t} FROM operations t
     WHERE t.execution_id = $1 AND t.tenant_id = $2 ORDER BY t.position, t.generation;

-- operationsOfExecutionForWorker
SELECT {columns:Operation t} FROM operations t
     WHERE t.execution_id = $1 ORDER BY t.position, t.generation;

-- operationById
SELECT {columns:Operation t} FROM operations t WHERE t.id = $1 AND t.tenant_id = $2;

-- operationByIdWithSecretsHeld
SELECT r.*, h.holds_secrets
     FROM (SELECT EXISTS (SELECT 1 FROM tenant_connector_secrets x
                           WHERE x.tenant_id = $2 AND x.connector = ANY($3::text[])) AS holds_secrets) h
     LEFT JOIN LATERAL (SELECT {columns:Operation t} FROM operations t WHERE t.id = $1 AND t.tenant_id = $2) r ON true;

-- operationWithVersionById
SELECT r.*, h.holds_secrets
     FROM (SELECT EXISTS (SELECT 1 FROM tenant_connector_secrets x
                           WHERE x.tenant_id = $2 AND x.connector = ANY($3::text[])) AS holds_secrets) h
     LEFT JOIN LATERAL (SELECT {columns:Operation t}, md5(jsonb_build_array(t.status, t.terminal_reason, t.attempt, t.approval,
       t.obligation - 'rechecks' - 'escalated_at', t.evidence,
       t.acknowledged_at IS NOT NULL, t.rejected_at IS NOT NULL)::text
       || CASE WHEN EXISTS (
          WITH RECURSIVE chain AS (
            SELECT ro.id, ro.retry_of, ro.status, ro.acknowledged_at, ro.obligation
            FROM operations ro WHERE ro.id = t.retry_of AND ro.tenant_id = t.tenant_id
            UNION
            SELECT ro.id, ro.retry_of, ro.status, ro.acknowledged_at, ro.obligation
            FROM operations ro JOIN chain c ON ro.id = c.retry_of AND ro.tenant_id = t.tenant_id)
          SELECT 1 FROM chain WHERE chain.status = 'FAILED'
            AND (chain.acknowledged_at IS NOT NULL
                 OR coalesce(chain.obligation, '{}'::jsonb) ? 'effect_shown_after_failed')) THEN ' retry_refuted' ELSE '' END
       || CASE WHEN coalesce(t.approval, 'null'::jsonb) = 'null'::jsonb AND NOT t.requires_approval
          AND (t.status = 'PREPARED'
               OR (t.status = 'MANUAL_REVIEW' AND t.attempt = 0)) THEN ' approval_policy ' || coalesce((SELECT CASE WHEN vt.id IS NOT NULL THEN jsonb_build_object('approvalRules', vt.settings->'approvalRules', 'approvalAmountAbove', vt.settings->'approvalAmountAbove')::text END FROM tenants vt WHERE vt.id = t.tenant_id), '') ELSE '' END) AS version
     FROM operations t WHERE t.id = $1 AND t.tenant_id = $2) r ON true;

-- lockOperationAtVersion
SELECT t.id FROM operations t
     WHERE t.id = $1 AND t.tenant_id = $2
       AND ($3::text[] IS NULL OR md5(jsonb_build_array(t.status, t.terminal_reason, t.attempt, t.approval,
       t.obligation - 'rechecks' - 'escalated_at', t.evidence,
       t.acknowledged_at IS NOT NULL, t.rejected_at IS NOT NULL)::text
       || CASE WHEN EXISTS (SELECT 1 FROM verity_retry_chain_locked(t.retry_of, t.tenant_id) chain WHERE chain.status = 'FAILED'
            AND (chain.acknowledged_at IS NOT NULL
                 OR coalesce(chain.obligation, '{}'::jsonb) ? 'effect_shown_after_failed')) THEN ' retry_refuted' ELSE '' END
       || CASE WHEN coalesce(t.approval, 'null'::jsonb) = 'null'::jsonb AND NOT t.requires_approval
          AND (t.status = 'PREPARED'
               OR (t.status = 'MANUAL_REVIEW' AND t.attempt = 0)) THEN ' approval_policy ' || coalesce((SELECT CASE WHEN vt.id IS NOT NULL THEN jsonb_build_object('approvalRules', vt.settings->'approvalRules', 'approvalAmountAbove', vt.settings->'approvalAmountAbove')::text END FROM tenants vt WHERE vt.id = t.tenant_id FOR SHARE), '') ELSE '' END) = ANY($3::text[]))
       AND ($4::text[] IS NULL OR NOT md5(jsonb_build_array(t.status, t.terminal_reason, t.attempt, t.approval,
       t.obligation - 'rechecks' - 'escalated_at', t.evidence,
       t.acknowledged_at IS NOT NULL, t.rejected_at IS NOT NULL)::text
       || CASE WHEN EXISTS (SELECT 1 FROM verity_retry_chain_locked(t.retry_of, t.tenant_id) chain WHERE chain.status = 'FAILED'
            AND (chain.acknowledged_at IS NOT NULL
                 OR coalesce(chain.obligation, '{}'::jsonb) ? 'effect_shown_after_failed')) THEN ' retry_refuted' ELSE '' END
       || CASE WHEN coalesce(t.approval, 'null'::jsonb) = 'null'::jsonb AND NOT t.requires_approval
          AND (t.status = 'PREPARED'
               OR (t.status = 'MANUAL_REVIEW' AND t.attempt = 0)) THEN ' approval_policy ' || coalesce((SELECT CASE WHEN vt.id IS NOT NULL THEN jsonb_build_object('approvalRules', vt.settings->'approvalRules', 'approvalAmountAbove', vt.settings->'approvalAmountAbove')::text END FROM tenants vt WHERE vt.id = t.tenant_id FOR SHARE), '') ELSE '' END) = ANY($4::text[]))
       AND (NOT $5::boolean
            OR (t.status IN ('MANUAL_REVIEW') AND t.obligation->'resolution' IS NULL)) FOR SHARE;

-- operationVersionsBeforeInvestigations
SELECT g.i AS investigation,
            md5(jsonb_build_array(t.status, t.terminal_reason, t.attempt, t.approval,
       (g.obligation) - 'rechecks' - 'escalated_at', t.evidence,
       t.acknowledged_at IS NOT NULL, t.rejected_at IS NOT NULL)::text
       || CASE WHEN EXISTS (
          WITH RECURSIVE chain AS (
            SELECT ro.id, ro.retry_of, ro.status, ro.acknowledged_at, ro.obligation
            FROM operations ro WHERE ro.id = t.retry_of AND ro.tenant_id = t.tenant_id
            UNION
            SELECT ro.id, ro.retry_of, ro.status, ro.acknowledged_at, ro.obligation
            FROM operations ro JOIN chain c ON ro.id = c.retry_of AND ro.tenant_id = t.tenant_id)
          SELECT 1 FROM chain WHERE chain.status = 'FAILED'
            AND (chain.acknowledged_at IS NOT NULL
                 OR coalesce(chain.obligation, '{}'::jsonb) ? 'effect_shown_after_failed')) THEN ' retry_refuted' ELSE '' END
       || CASE WHEN coalesce(t.approval, 'null'::jsonb) = 'null'::jsonb AND NOT t.requires_approval
          AND (t.status = 'PREPARED'
               OR (t.status = 'MANUAL_REVIEW' AND t.attempt = 0)) THEN ' approval_policy ' || coalesce((SELECT CASE WHEN vt.id IS NOT NULL THEN jsonb_build_object('approvalRules', vt.settings->'approvalRules', 'approvalAmountAbove', vt.settings->'approvalAmountAbove')::text END FROM tenants vt WHERE vt.id = t.tenant_id), '') ELSE '' END) AS version
     FROM operations t,
          LATERAL (SELECT i, CASE WHEN absent THEN t.obligation - 'investigations'
                    ELSE t.obligation || jsonb_build_object('investigations',
                      (SELECT coalesce(jsonb_agg(a.x ORDER BY a.n), '[]'::jsonb)
                         FROM jsonb_array_elements(t.obligation->'investigations') WITH ORDINALITY AS a(x, n)
                        WHERE a.n <= i)) END
                    || jsonb_build_object('due_at', t.obligation->'investigations'->i->'previous_due_at') AS obligation
             FROM generate_series(0, jsonb_array_length(t.obligation->'investigations') - 1) AS i,
                  (VALUES (false), (true)) AS b(absent)
            WHERE NOT absent OR i = 0) AS g
     WHERE t.id = $1 AND t.tenant_id = $2 AND jsonb_typeof(t.obligation->'investigations') = 'array';

-- operationByIdForWorker
SELECT {columns:Operation t} FROM operations t WHERE t.id = $1;

-- operationWithClockForWorker
SELECT {columns:Operation t}, clock_timestamp() AS database_now FROM operations t WHERE t.id = $1;

-- operationsOfExecutions
SELECT {columns:Operation t} FROM operations t
     WHERE t.execution_id = ANY($1) AND t.tenant_id = $2 ORDER BY t.position, t.generation;

-- listExecutions
SELECT r.*, h.holds_secrets
     FROM (SELECT EXISTS (SELECT 1 FROM tenant_connector_secrets x
                           WHERE x.tenant_id = $1 AND x.connector = ANY($3::text[])) AS holds_secrets) h
     LEFT JOIN LATERAL (SELECT c.* FROM (
       SELECT r.*, row_number() OVER w AS page_n, sum(r.page_row_bytes) OVER w AS page_bytes, count(*) OVER () AS page_read
       FROM (SELECT {columns:Execution e}, (octet_length(e::text) + coalesce((SELECT sum(octet_length(o::text)) FROM operations o
                                       WHERE o.execution_id = e.id AND o.tenant_id = e.tenant_id), 0))::float8 AS page_row_bytes FROM executions e
     WHERE e.tenant_id = $1 ORDER BY e.id DESC LIMIT $2) r WINDOW w AS (ORDER BY id DESC ROWS UNBOUNDED PRECEDING)) c
     WHERE c.page_n < $2 AND (c.page_n = 1 OR c.page_bytes <= $4::float8) ORDER BY id DESC) r ON true ORDER BY r.id DESC;

-- listExecutionsByStatus
SELECT r.*, h.holds_secrets
     FROM (SELECT EXISTS (SELECT 1 FROM tenant_connector_secrets x
                           WHERE x.tenant_id = $1 AND x.connector = ANY($4::text[])) AS holds_secrets) h
     LEFT JOIN LATERAL (SELECT c.* FROM (
       SELECT r.*, row_number() OVER w AS page_n, sum(r.page_row_bytes) OVER w AS page_bytes, count(*) OVER () AS page_read
       FROM (SELECT {columns:Execution e}, (octet_length(e::text) + coalesce((SELECT sum(octet_length(o::text)) FROM operations o
                                       WHERE o.execution_id = e.id AND o.tenant_id = e.tenant_id), 0))::float8 AS page_row_bytes FROM executions e
     WHERE e.tenant_id = $1 AND e.status = $3 ORDER BY e.id DESC LIMIT $2) r WINDOW w AS (ORDER BY id DESC ROWS UNBOUNDED PRECEDING)) c
     WHERE c.page_n < $2 AND (c.page_n = 1 OR c.page_bytes <= $5::float8) ORDER BY id DESC) r ON true ORDER BY r.id DESC;

-- listExecutionsBefore
SELECT r.*, h.holds_secrets
     FROM (SELECT EXISTS (SELECT 1 FROM tenant_connector_secrets x
                           WHERE x.tenant_id = $1 AND x.connector = ANY($4::text[])) AS holds_secrets) h
     LEFT JOIN LATERAL (SELECT c.* FROM (
       SELECT r.*, row_number() OVER w AS page_n, sum(r.page_row_bytes) OVER w AS page_bytes, count(*) OVER () AS page_read
       FROM (SELECT {columns:Execution e}, (octet_length(e::text) + coalesce((SELECT sum(octet_length(o::text)) FROM operations o
                                       WHERE o.execution_id = e.id AND o.tenant_id = e.tenant_id), 0))::float8 AS page_row_bytes FROM executions e
     WHERE e.tenant_id = $1 AND e.id < $3 ORDER BY e.id DESC LIMIT $2) r WINDOW w AS (ORDER BY id DESC ROWS UNBOUNDED PRECEDING)) c
     WHERE c.page_n < $2 AND (c.page_n = 1 OR c.page_bytes <= $5::float8) ORDER BY id DESC) r ON true ORDER BY r.id DESC;

-- listExecutionsByStatusBefore
SELECT r.*, h.holds_secrets
     FROM (SELECT EXISTS (SELECT 1 FROM tenant_connector_secrets x
                           WHERE x.tenant_id = $1 AND x.connector = ANY($5::text[])) AS holds_secrets) h
     LEFT JOIN LATERAL (SELECT c.* FROM (
       SELECT r.*, row_number() OVER w AS page_n, sum(r.page_row_bytes) OVER w AS page_bytes, count(*) OVER () AS page_read
       FROM (SELECT {columns:Execution e}, (octet_length(e::text) + coalesce((SELECT sum(octet_length(o::text)) FROM operations o
                                       WHERE o.execution_id = e.id AND o.tenant_id = e.tenant_id), 0))::float8 AS page_row_bytes FROM executions e
     WHERE e.tenant_id = $1 AND e.status = $3 AND e.id < $4 ORDER BY e.id DESC LIMIT $2) r WINDOW w AS (ORDER BY id DESC ROWS UNBOUNDED PRECEDING)) c
     WHERE c.page_n < $2 AND (c.page_n = 1 OR c.page_bytes <= $6::float8) ORDER BY id DESC) r ON true ORDER BY r.id DESC;

-- lockOperations
SELECT {columns:Operation t} FROM operations t WHERE t.execution_id = $1 ORDER BY t.id FOR UPDATE;

-- lockExecution
SELECT status FROM executions WHERE id = $1 AND tenant_id = $2 FOR UPDATE;

-- lockExecutionForWorker
SELECT status FROM executions WHERE id = $1 FOR UPDATE;

-- tenantById
SELECT {columns:Tenant t} FROM tenants t WHERE t.id = $1;

-- listEvents
SELECT {columns:Event t} FROM events t
     WHERE t.execution_id = $1 AND t.tenant_id = $4 AND t.seq > $2 ORDER BY t.seq LIMIT $3;

-- eventsWithinBytes
SELECT c.* FROM (
       SELECT r.*, row_number() OVER w AS page_n, sum(r.page_row_bytes) OVER w AS page_bytes, count(*) OVER () AS page_read
       FROM (SELECT {columns:Event t}, octet_length(t::text)::float8 AS page_row_bytes FROM events t
     WHERE t.execution_id = $1 AND t.tenant_id = $4 AND t.seq > $2 ORDER BY t.seq LIMIT $3) r WINDOW w AS (ORDER BY seq ROWS UNBOUNDED PRECEDING)) c
     WHERE c.page_n < $3 AND (c.page_n = 1 OR c.page_bytes <= $5::float8) ORDER BY seq;

-- eventSeq
SELECT seq FROM events WHERE id = $1 AND execution_id = $2 AND tenant_id = $3;

-- eventOfOperationForWorker
SELECT 1 FROM events WHERE id = $1 AND operation_id = $2;

-- lastStatusChanges
SELECT DISTINCT ON (operation_id) operation_id, id, from_status, to_status, data->>'cause' AS cause,
            data->>'refusal' AS refusal, data->>'actor' AS actor, created_at
     FROM events WHERE operation_id = ANY($1) AND tenant_id = $2 AND type = 'operation.status_changed'
     ORDER BY operation_id, seq DESC;

-- executionMove
SELECT data->>'by' AS by, created_at FROM events
     WHERE execution_id = $1 AND tenant_id = $2 AND type = 'execution.status_changed' AND to_status = $3
     ORDER BY seq DESC LIMIT 1;

-- lastApprovalDecision
SELECT ev.data->>'decision' AS decision, ev.data->>'by' AS by, ev.created_at,
            x.deadline_at <= clock_timestamp() AS deadline_passed
     FROM events ev JOIN executions x ON x.id = ev.execution_id AND x.tenant_id = ev.tenant_id
     WHERE ev.operation_id = $1 AND ev.tenant_id = $2 AND ev.type = 'approval.decided'
     ORDER BY ev.seq DESC LIMIT 1;

-- approvalDecisionOnRequest
SELECT ev.data->>'decision' AS decision, ev.data->>'by' AS by, ev.created_at
     FROM events ev
     WHERE ev.operation_id = $1 AND ev.tenant_id = $2 AND ev.type = 'approval.decided'
       AND to_char((ev.created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') >= $3::text
     ORDER BY ev.seq LIMIT 1;

-- lastStatusChangesForWorker
SELECT DISTINCT ON (operation_id) operation_id, id, from_status, to_status, data->>'cause' AS cause,
            data->>'refusal' AS refusal, data->>'actor' AS actor, created_at
     FROM events WHERE operation_id = ANY($1) AND type = 'operation.status_changed'
     ORDER BY operation_id, seq DESC;

-- lastContradictionsForWorker
SELECT DISTINCT ON (operation_id) operation_id, id FROM events
     WHERE operation_id = ANY($1)
       AND ((type IN ('operation.rechecked', 'operation.acknowledged_late') AND data->>'after' = 'FAILED')
         OR (type = 'operation.rejected_late' AND data->>'after' = 'VERIFIED'))
     ORDER BY operation_id, seq DESC;
