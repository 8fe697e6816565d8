-- list
SELECT id, kind, connector, changed_by, changed_at, before, after FROM admin_changes
     WHERE tenant_id = $1
       AND ($2::text IS NULL OR seq < (SELECT seq FROM admin_changes WHERE tenant_id = $1 AND id = $2))
       AND ($3::text IS NULL OR kind = $3) AND ($4::text IS NULL OR connector = $4)
     ORDER BY seq DESC LIMIT $5;

-- page
SELECT c.* FROM (
       SELECT r.*, row_number() OVER w AS page_n, sum(r.page_row_bytes) OVER w AS page_bytes, count(*) OVER () AS page_read
       FROM (SELECT id, kind, connector, changed_by, changed_at, before, after, seq AS page_order,
            (octet_length(coalesce(before::text, '')) + octet_length(coalesce(after::text, '')))::float8 AS page_row_bytes
     FROM admin_changes
     WHERE tenant_id = $1
       AND ($2::text IS NULL OR seq < (SELECT seq FROM admin_changes WHERE tenant_id = $1 AND id = $2))
       AND ($3::text IS NULL OR kind = $3) AND ($4::text IS NULL OR connector = $4)
     ORDER BY seq DESC LIMIT $5) r WINDOW w AS (ORDER BY page_order DESC ROWS UNBOUNDED PRECEDING)) c
     WHERE c.page_n < $5 AND (c.page_n = 1 OR c.page_bytes <= $6::float8) ORDER BY page_order DESC;
