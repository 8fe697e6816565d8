-- executionsInFlight
SELECT status, count(*)::int AS n FROM executions
     WHERE status NOT IN ('completed', 'failed', 'cancelled', 'expired') GROUP BY status;

-- operationsInFlight
SELECT status, count(*)::int AS n FROM operations
     WHERE status IN ('PREPARED', 'SENT', 'ACKNOWLEDGED', 'UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW') GROUP BY status;

-- obligationsByAge
SELECT CASE
       WHEN due IS NULL OR due >= now() THEN 'not_due'
       WHEN due >= now() - interval '1 hour' THEN 'overdue_lt_1h'
       WHEN due >= now() - interval '24 hours' THEN 'overdue_1h_to_24h'
       ELSE 'overdue_gt_24h' END AS age, count(*)::int AS n
     FROM (SELECT (obligation->>'due_at')::timestamptz AS due FROM operations
           WHERE status = 'MANUAL_REVIEW' AND obligation->'resolution' IS NULL) held
     GROUP BY 1;
