-- tryLock
SELECT pg_try_advisory_lock($1) AS locked;

-- unlock
SELECT pg_advisory_unlock($1);

-- startLog
INSERT INTO sweep_log (worker) VALUES ($1) RETURNING id;

-- finishLog
UPDATE sweep_log SET finished_at = clock_timestamp(), report = $2 WHERE id = $1;

-- msSinceLastSweep
SELECT (extract(epoch FROM clock_timestamp() - started_at) * 1000)::float8 AS ms
     FROM sweep_log ORDER BY id DESC LIMIT 1;

-- executionsPastDeadline
SELECT id FROM executions WHERE status NOT IN ('completed', 'failed', 'cancelled', 'expired') AND deadline_at <= now()
     ORDER BY deadline_at LIMIT $1;

-- staleExecutions
SELECT id FROM executions
     WHERE status NOT IN ('completed', 'failed', 'cancelled', 'expired')
       AND updated_at < now() - make_interval(secs => $1 / 1000.0)
     ORDER BY updated_at LIMIT $2;

-- endedWithStaleOutcome
SELECT x.id FROM executions x
     WHERE x.status IN ('completed', 'failed', 'cancelled', 'expired')
       AND (x.criteria_results @> '[{"verdict": "pending"}]'::jsonb
            OR (x.criteria_results IS NULL AND x.criteria <> '[]'::jsonb))
       AND (x.criteria_results IS NULL AND x.updated_at < now() - make_interval(secs => $1 / 1000.0)
            OR EXISTS (
         SELECT 1 FROM jsonb_array_elements(coalesce(x.criteria_results, '[]'::jsonb)) c
         CROSS JOIN LATERAL (
           SELECT o.status, o.verification_method, o.updated_at FROM operations o
           WHERE o.execution_id = x.id AND o.key = c->>'operation'
           ORDER BY o.generation DESC LIMIT 1) o
         WHERE c->>'verdict' = 'pending'
           AND (o.status IN ('VERIFIED', 'FAILED', 'CANCELLED')
                OR (o.status IN ('ACKNOWLEDGED')
                    AND o.verification_method <> 'read_after_write'))
           AND o.updated_at < now() - make_interval(secs => $1 / 1000.0)))
     LIMIT $2;

-- sentBefore
SELECT {columns:Operation o} FROM operations o
     WHERE o.status = 'SENT' AND o.sent_at < now() - make_interval(secs => $1 / 1000.0)
     LIMIT $2;

-- owedChecks
SELECT id, execution_id, status, verification_method, next_check_at IS NOT NULL AS recheck_scheduled,
       next_check_at
     FROM operations
     WHERE ((status IN ('ACKNOWLEDGED')
               AND verification_method = 'read_after_write')
            OR status IN ('UNKNOWN', 'RECONCILING')
            OR (status IN ('MANUAL_REVIEW') AND next_check_at IS NOT NULL))
       AND coalesce(next_check_at, updated_at) < now() - make_interval(secs => $1 / 1000.0)
     ORDER BY updated_at LIMIT $2;

-- unsentReleases
SELECT id, execution_id FROM operations
     WHERE status = 'MANUAL_REVIEW' AND attempt = 0
       AND obligation->'resolution'->>'status' = 'SENT'
       AND (obligation->'resolution'->>'at')::timestamptz < now() - make_interval(secs => $1 / 1000.0)
     ORDER BY (obligation->'resolution'->>'at')::timestamptz LIMIT $2;

-- heldOfEndedExecutions
SELECT {columns:Operation o o__}, e.status AS e__status FROM operations o
     JOIN executions e ON e.id = o.execution_id
     WHERE o.status = 'MANUAL_REVIEW' AND o.attempt = 0
       AND e.status NOT IN ('created', 'validating', 'resolving_context', 'planning', 'running', 'waiting_for_tool', 'waiting_for_approval', 'validating_output', 'completed')
     ORDER BY o.updated_at LIMIT $1;

-- retireObservations
UPDATE operations SET next_check_at = NULL WHERE id IN (
       SELECT id FROM operations
       WHERE status = 'VERIFIED' AND next_check_at IS NOT NULL
         AND created_at <= now() - make_interval(secs => $1 / 1000.0)
       LIMIT $2);

-- claimDueObservations
WITH due AS (
       SELECT id FROM operations
       WHERE status = 'VERIFIED' AND next_check_at IS NOT NULL AND next_check_at <= now()
         AND created_at > now() - make_interval(secs => $1 / 1000.0)
       ORDER BY next_check_at LIMIT $2 FOR UPDATE SKIP LOCKED
     )
     UPDATE operations o SET next_check_at = now() + make_interval(secs => $3 / 1000.0)
     FROM due WHERE o.id = due.id RETURNING o.id, o.execution_id;

-- overdueObligations
SELECT {columns:Operation o} FROM operations o
     WHERE o.status = 'MANUAL_REVIEW' AND (o.obligation->>'due_at')::timestamptz < now()
       AND o.obligation->>'escalated_at' IS NULL AND o.obligation->'resolution' IS NULL
     LIMIT $1;

-- executionTraceParents
SELECT id, trace_parent FROM executions
     WHERE id = ANY($1::text[]) AND trace_parent IS NOT NULL;

-- operationTraceParents
SELECT o.id, e.trace_parent FROM operations o JOIN executions e ON e.id = o.execution_id
     WHERE o.id = ANY($1::text[]) AND e.trace_parent IS NOT NULL;
