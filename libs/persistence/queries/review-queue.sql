-- countWithSecretsHeld
SELECT r.*, h.holds_secrets
     FROM (SELECT EXISTS (SELECT 1 FROM tenant_connector_secrets x
                           WHERE x.tenant_id = $1 AND x.connector = ANY($8::text[])) AS holds_secrets) h
     LEFT JOIN LATERAL (SELECT count(*)::int AS n FROM operations o JOIN executions e ON e.id = o.execution_id AND e.tenant_id = o.tenant_id
     WHERE o.tenant_id = $1
       AND (($2::text = 'approvals' AND o.status = 'PREPARED' AND o.approval->>'state' = 'requested'
             AND e.deadline_at > clock_timestamp())
         OR ($2::text = 'manual_reviews' AND o.status = 'MANUAL_REVIEW'
             AND ($3::text IS NULL OR o.obligation->>'reason' = $3)
             AND ($4::boolean IS NULL OR (o.obligation->>'escalated_at' IS NOT NULL) = $4)))
       AND ($5::text IS NULL OR o.connector = $5)
       AND ($6::text IS NULL OR o.id = $6 OR o.execution_id = $6 OR o.key ILIKE $7 OR o.action ILIKE $7
            OR e.intent ILIKE $7 OR e.agent_id ILIKE $7)) r ON true;

-- page
SELECT c.* FROM (
       SELECT r.*, row_number() OVER w AS page_n, sum(r.page_row_bytes) OVER w AS page_bytes, count(*) OVER () AS page_read
       FROM (SELECT {columns:Operation s}, octet_length(s::text)::float8 AS page_row_bytes
     FROM (SELECT o.id FROM operations o JOIN executions e ON e.id = o.execution_id AND e.tenant_id = o.tenant_id
     WHERE o.tenant_id = $1
       AND (($2::text = 'approvals' AND o.status = 'PREPARED' AND o.approval->>'state' = 'requested'
             AND e.deadline_at > clock_timestamp())
         OR ($2::text = 'manual_reviews' AND o.status = 'MANUAL_REVIEW'
             AND ($3::text IS NULL OR o.obligation->>'reason' = $3)
             AND ($4::boolean IS NULL OR (o.obligation->>'escalated_at' IS NOT NULL) = $4)))
       AND ($5::text IS NULL OR o.connector = $5)
       AND ($6::text IS NULL OR o.id = $6 OR o.execution_id = $6 OR o.key ILIKE $7 OR o.action ILIKE $7
            OR e.intent ILIKE $7 OR e.agent_id ILIKE $7)
       AND ($8::text IS NULL OR o.id < $8)
     ORDER BY o.id DESC LIMIT $9) p JOIN operations s ON s.id = p.id) r WINDOW w AS (ORDER BY id DESC ROWS UNBOUNDED PRECEDING)) c
     WHERE c.page_n < $9 AND (c.page_n = 1 OR c.page_bytes <= $10::float8) ORDER BY id DESC;

-- executions
SELECT {columns:Execution t} FROM executions t WHERE t.id = ANY($1) AND t.tenant_id = $2;

-- counts
SELECT count(*) FILTER (WHERE status = 'PREPARED' AND approval->>'state' = 'requested'
              AND EXISTS (SELECT 1 FROM executions e WHERE e.id = execution_id AND e.deadline_at > clock_timestamp()))
              AS approvals,
            count(*) FILTER (WHERE status = 'MANUAL_REVIEW') AS manual_reviews,
            count(*) FILTER (WHERE status = 'MANUAL_REVIEW' AND obligation->>'escalated_at' IS NOT NULL) AS escalated,
            count(*) FILTER (WHERE status = 'MANUAL_REVIEW' AND (obligation->>'due_at')::timestamptz < now()
                               AND obligation->'resolution' IS NULL) AS overdue
       FROM operations
      WHERE tenant_id = $1 AND status IN ('PREPARED', 'MANUAL_REVIEW');
