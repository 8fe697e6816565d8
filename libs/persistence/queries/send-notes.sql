-- lockOperation
SELECT execution_id FROM operations WHERE id = $1 FOR UPDATE;
