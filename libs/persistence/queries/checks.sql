-- mergeApprovalBaseline
UPDATE operations SET approval = coalesce(approval, '{}'::jsonb) || $2
     WHERE id = $1 AND status = 'PREPARED';

-- scheduleNextCheck
UPDATE operations SET check_count = $3,
         next_check_at = clock_timestamp() + $4::bigint * interval '1 millisecond'
     WHERE id = $1 AND status = $2 AND check_count = $5;

-- postponeRecheck
UPDATE operations
     SET next_check_at = clock_timestamp() + $3::bigint * interval '1 millisecond'
     WHERE id = $1 AND status = 'MANUAL_REVIEW'
       AND date_trunc('milliseconds', next_check_at) = $2::timestamptz
     RETURNING id;

-- lastUnknownAfterSend
SELECT max(created_at) AS at, clock_timestamp() AS now FROM events
     WHERE operation_id = $1 AND tenant_id = $2 AND to_status = 'UNKNOWN'
       AND from_status IN ('SENT', 'ACKNOWLEDGED');

-- lastUnknownsAfterSend
SELECT ids.id AS operation_id, max(e.created_at) AS at, clock_timestamp() AS now
     FROM unnest($1::text[]) AS ids(id)
     LEFT JOIN events e ON e.operation_id = ids.id AND e.tenant_id = $2 AND e.to_status = 'UNKNOWN'
       AND e.from_status IN ('SENT', 'ACKNOWLEDGED')
     GROUP BY ids.id;

-- effectShownBefore
SELECT data->'evidence'->>'inconclusive' AS result, (data->'evidence') - 'inconclusive' AS evidence,
            created_at FROM events
     WHERE operation_id = $1 AND tenant_id = $2 AND type = 'operation.status_changed'
       AND data->'evidence'->>'inconclusive' IN ('found', 'mismatch', 'field_missing')
     ORDER BY seq LIMIT 1;
