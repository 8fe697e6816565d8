-- record
INSERT INTO recheck_requests (id, tenant_id, operation_id, requested_by, attempt)
     SELECT $1, $2, $3, $4, (SELECT o.attempt FROM operations o WHERE o.id = $3) FROM (SELECT pg_advisory_xact_lock(hashtextextended('recheck_requests' || chr(31) || $1, 0))) AS turn;

-- turn
SELECT pg_advisory_xact_lock(hashtextextended('recheck_requests' || chr(31) || $1, 0));

-- claim
UPDATE recheck_requests SET used_at = clock_timestamp()
     WHERE id = $1 AND operation_id = $2 AND used_at IS NULL
     AND (attempt IS NULL OR attempt = (SELECT o.attempt FROM operations o WHERE o.id = $2))
     RETURNING requested_by;

-- unused
SELECT requested_by, to_char((requested_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS requested_at FROM recheck_requests
     WHERE id = $1 AND operation_id = $2 AND used_at IS NULL
     AND (attempt IS NULL OR attempt = (SELECT o.attempt FROM operations o WHERE o.id = $2));

-- pruneUnusable
DELETE FROM recheck_requests WHERE id IN (
       SELECT unusable.id FROM (
         (SELECT r.id FROM recheck_requests r
          WHERE r.used_at IS NOT NULL AND r.used_at <= (SELECT clock_timestamp() - make_interval(secs => $2))
          ORDER BY r.used_at LIMIT $1)
         UNION ALL
         (SELECT r.id FROM recheck_requests r JOIN operations o ON o.id = r.operation_id
          WHERE r.used_at IS NULL
            AND (r.attempt <> o.attempt
                 OR (o.status NOT IN ('MANUAL_REVIEW')
                     AND o.updated_at <= clock_timestamp() - make_interval(secs => $3)))
          ORDER BY r.requested_at LIMIT $1)
       ) AS unusable LIMIT $1
     ) RETURNING id;
