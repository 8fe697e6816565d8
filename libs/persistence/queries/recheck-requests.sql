-- record
INSERT INTO recheck_requests (id, tenant_id, operation_id, requested_by)
     SELECT $1, $2, $3, $4 FROM (SELECT pg_advisory_xact_lock(hashtextextended('recheck_requests' || chr(31) || $1, 0))) AS turn;

-- turn
SELECT pg_advisory_xact_lock(hashtextextended('recheck_requests' || chr(31) || $1, 0));

-- claim
UPDATE recheck_requests SET used_at = clock_timestamp()
     WHERE id = $1 AND operation_id = $2 AND used_at IS NULL
     RETURNING requested_by;

-- unused
SELECT requested_by FROM recheck_requests WHERE id = $1 AND operation_id = $2 AND used_at IS NULL;
