-- tryLock
SELECT pg_try_advisory_lock($1) AS locked;

-- unlock
SELECT pg_advisory_unlock($1);

-- holder
SELECT pid FROM pg_locks
    WHERE locktype = 'advisory' AND granted AND classid = 0 AND objid = $1 AND objsubid = 1
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database());

-- applied
SELECT 1 AS applied FROM migrations WHERE name = $1;

-- unknown
SELECT name FROM migrations WHERE name <> ALL($1::text[]) ORDER BY timestamp, name;
