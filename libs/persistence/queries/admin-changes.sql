-- list
SELECT id, kind, connector, changed_by, changed_at, before, after FROM admin_changes
     WHERE tenant_id = $1
       AND ($2::text IS NULL OR seq < (SELECT seq FROM admin_changes WHERE tenant_id = $1 AND id = $2))
       AND ($3::text IS NULL OR kind = $3) AND ($4::text IS NULL OR connector = $4)
     ORDER BY seq DESC LIMIT $5;

-- listSizes
SELECT id, (octet_length(coalesce(before::text, '')) + octet_length(coalesce(after::text, '')))::float8 AS bytes
     FROM admin_changes
     WHERE tenant_id = $1
       AND ($2::text IS NULL OR seq < (SELECT seq FROM admin_changes WHERE tenant_id = $1 AND id = $2))
       AND ($3::text IS NULL OR kind = $3) AND ($4::text IS NULL OR connector = $4)
     ORDER BY seq DESC LIMIT $5;

-- byIds
SELECT id, kind, connector, changed_by, changed_at, before, after FROM admin_changes
     WHERE tenant_id = $1 AND id = ANY($2) ORDER BY seq DESC;
