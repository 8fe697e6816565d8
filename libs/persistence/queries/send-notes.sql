-- lockOperation
SELECT execution_id FROM operations WHERE id = $1 FOR UPDATE;

-- insertOnce
WITH seq AS (
       UPDATE executions SET event_seq = event_seq + 1, updated_at = clock_timestamp()
       WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM events WHERE operation_id = $3 AND type = $4)
       RETURNING id, tenant_id, event_seq
     )
     INSERT INTO events (id, execution_id, tenant_id, seq, operation_id, type, data)
     SELECT $2, id, tenant_id, event_seq, $3, $4, $5 FROM seq RETURNING id;
