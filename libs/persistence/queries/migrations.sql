-- lock
SELECT pg_advisory_lock($1);

-- unlock
SELECT pg_advisory_unlock($1);

-- applied
SELECT 1 AS applied FROM migrations WHERE name = $1;

-- unknown
SELECT name FROM migrations WHERE name <> ALL($1::text[]) ORDER BY timestamp, name;
