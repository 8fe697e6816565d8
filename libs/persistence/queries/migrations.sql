-- lock
SELECT pg_advisory_lock($1);

-- unlock
SELECT pg_advisory_unlock($1);
