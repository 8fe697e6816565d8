-- upsertSettings
INSERT INTO tenant_connector_settings (tenant_id, connector, allow_hosts, spending_caps, updated_by,
                                                          read_back_binding)
     VALUES ($1, $2, coalesce($3::jsonb, '[]'), coalesce($4::jsonb, '[]'), $5, coalesce($6::text, 'declared'))
     ON CONFLICT (tenant_id, connector) DO UPDATE SET
       allow_hosts = coalesce($3::jsonb, tenant_connector_settings.allow_hosts),
       spending_caps = coalesce($4::jsonb, tenant_connector_settings.spending_caps),
       read_back_binding = coalesce($6::text, tenant_connector_settings.read_back_binding),
       updated_by = $5,
       -- The row's version (the send guard's settings_changed): moved only by a change, not by a write of the same values.
       updated_at = CASE WHEN (coalesce($3::jsonb, tenant_connector_settings.allow_hosts),
                               coalesce($4::jsonb, tenant_connector_settings.spending_caps),
                               coalesce($6::text, tenant_connector_settings.read_back_binding))
                              IS DISTINCT FROM (tenant_connector_settings.allow_hosts,
                                                tenant_connector_settings.spending_caps,
                                                tenant_connector_settings.read_back_binding)
                         THEN now() ELSE tenant_connector_settings.updated_at END;

-- upsertSecret
WITH written AS (
       INSERT INTO tenant_connector_secrets (tenant_id, connector, name, value, updated_by, updated_at)
       VALUES ($1, $2, $3, $4, $5, clock_timestamp())
       ON CONFLICT (tenant_id, connector, name) DO UPDATE SET value = $4, updated_by = $5, updated_at = clock_timestamp()
       RETURNING tenant_id
     )
     SELECT pg_notify('verity_tenant_secrets', tenant_id) FROM written;

-- deleteSecret
WITH deleted AS (
       DELETE FROM tenant_connector_secrets WHERE tenant_id = $1 AND connector = $2 AND name = $3 RETURNING tenant_id, name
     )
     SELECT name, pg_notify('verity_tenant_secrets', tenant_id) FROM deleted;

-- deleteSecrets
WITH deleted AS (
       DELETE FROM tenant_connector_secrets WHERE tenant_id = $1 AND connector = $2 RETURNING tenant_id
     )
     SELECT pg_notify('verity_tenant_secrets', $1) WHERE EXISTS (SELECT 1 FROM deleted);

-- listenForSecretChanges
LISTEN verity_tenant_secrets;

-- heardSoFar
SELECT 1;

-- deleteSettings
DELETE FROM tenant_connector_settings WHERE tenant_id = $1 AND connector = $2;

-- settingsMeta
SELECT updated_at, updated_by FROM tenant_connector_settings WHERE tenant_id = $1 AND connector = $2;

-- secretNames
SELECT name FROM tenant_connector_secrets WHERE tenant_id = $1 AND connector = $2 ORDER BY name;

-- secretCount
SELECT count(*)::int AS count FROM tenant_connector_secrets WHERE tenant_id = $1 AND connector = $2;

-- lockChange
SELECT pg_advisory_xact_lock(hashtextextended('tenant_connector_settings' || chr(31) || $1 || chr(31) || $2, 0));

-- snapshot
SELECT (snap.s || jsonb_build_object(
       'secrets_written_at', coalesce((SELECT jsonb_object_agg(x.name, to_char(x.updated_at AT TIME ZONE 'UTC',
                                                                         'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
                                       FROM tenant_connector_secrets x
                                       WHERE x.tenant_id = $1 AND x.connector = $2), '{}'::jsonb)))::text AS settings, md5(snap.s::text || coalesce(chr(31) || (SELECT string_agg(x.name || '@' || (extract(epoch FROM x.updated_at) * 1000000)::bigint::text, ','
                               ORDER BY x.name)
     FROM tenant_connector_secrets x WHERE x.tenant_id = $1 AND x.connector = $2), '')) AS version
     FROM (SELECT (SELECT jsonb_build_object(
       'allow_hosts', coalesce(s.allow_hosts, '[]'::jsonb),
       'spending_caps', coalesce(s.spending_caps, '[]'::jsonb),
       'read_back_binding', coalesce(s.read_back_binding, 'declared'),
       'secrets', coalesce((SELECT jsonb_agg(x.name ORDER BY x.name) FROM tenant_connector_secrets x
                            WHERE x.tenant_id = $1 AND x.connector = $2), '[]'::jsonb))
     FROM (VALUES (1)) AS one
     LEFT JOIN tenant_connector_settings s ON s.tenant_id = $1 AND s.connector = $2) AS s) snap;

-- version
SELECT md5((SELECT jsonb_build_object(
       'allow_hosts', coalesce(s.allow_hosts, '[]'::jsonb),
       'spending_caps', coalesce(s.spending_caps, '[]'::jsonb),
       'read_back_binding', coalesce(s.read_back_binding, 'declared'),
       'secrets', coalesce((SELECT jsonb_agg(x.name ORDER BY x.name) FROM tenant_connector_secrets x
                            WHERE x.tenant_id = $1 AND x.connector = $2), '[]'::jsonb))
     FROM (VALUES (1)) AS one
     LEFT JOIN tenant_connector_settings s ON s.tenant_id = $1 AND s.connector = $2)::text || coalesce(chr(31) || (SELECT string_agg(x.name || '@' || (extract(epoch FROM x.updated_at) * 1000000)::bigint::text, ','
                               ORDER BY x.name)
     FROM tenant_connector_secrets x WHERE x.tenant_id = $1 AND x.connector = $2), '')) AS version;

-- recordChange
INSERT INTO admin_changes (id, tenant_id, kind, connector, changed_by, before, after)
     SELECT $3, $1, 'connector_settings', $2, $4, $5::jsonb, ((SELECT jsonb_build_object(
       'allow_hosts', coalesce(s.allow_hosts, '[]'::jsonb),
       'spending_caps', coalesce(s.spending_caps, '[]'::jsonb),
       'read_back_binding', coalesce(s.read_back_binding, 'declared'),
       'secrets', coalesce((SELECT jsonb_agg(x.name ORDER BY x.name) FROM tenant_connector_secrets x
                            WHERE x.tenant_id = $1 AND x.connector = $2), '[]'::jsonb))
     FROM (VALUES (1)) AS one
     LEFT JOIN tenant_connector_settings s ON s.tenant_id = $1 AND s.connector = $2) || jsonb_build_object(
       'secrets_written_at', coalesce((SELECT jsonb_object_agg(x.name, to_char(x.updated_at AT TIME ZONE 'UTC',
                                                                         'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
                                       FROM tenant_connector_secrets x
                                       WHERE x.tenant_id = $1 AND x.connector = $2), '{}'::jsonb)));
