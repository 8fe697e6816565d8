-- executionsByStatus
SELECT status, count(*)::int AS n FROM executions GROUP BY status;

-- operationsByStatus
SELECT status, count(*)::int AS n FROM operations GROUP BY status;

-- eventsByType
SELECT type, coalesce(to_status, '') AS to_status, count(*)::int AS n FROM events GROUP BY 1, 2;

-- overdueObligations
SELECT count(*)::int AS n FROM operations
     WHERE status = 'MANUAL_REVIEW' AND (obligation->>'due_at')::timestamptz < now();
