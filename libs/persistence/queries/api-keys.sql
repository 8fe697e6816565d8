-- ensureTenant
INSERT INTO tenants (id, name) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING;

-- createTenant
INSERT INTO tenants (id, name) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING RETURNING id;

-- tenantExists
SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1) AS exists,
       (SELECT count(*)::int FROM tenants) AS tenants;

-- createKey
INSERT INTO api_keys (id, tenant_id, role, key_hash, key_prefix, label) VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (key_hash) DO NOTHING;

-- revokeKey
WITH locked AS (
       SELECT id FROM api_keys WHERE (id = $1 OR key_prefix = $1) AND revoked_at IS NULL FOR UPDATE
     ), revoked AS (
       UPDATE api_keys k SET revoked_at = clock_timestamp() FROM locked
       WHERE k.id = locked.id AND k.revoked_at IS NULL RETURNING k.id
     )
     SELECT id, pg_notify('verity_keys', id) FROM revoked;

-- revokeKeyById
WITH locked AS (
       SELECT id FROM api_keys WHERE id = $1 AND revoked_at IS NULL FOR UPDATE
     ), revoked AS (
       UPDATE api_keys k SET revoked_at = clock_timestamp() FROM locked
       WHERE k.id = locked.id AND k.revoked_at IS NULL RETURNING k.id, k.revoked_at
     )
     SELECT id, revoked_at, pg_notify('verity_keys', id) FROM revoked;

-- keyRevokedAt
SELECT revoked_at FROM api_keys WHERE id = $1;

-- listenForRevocations
LISTEN verity_keys;

-- keyActive
SELECT 1 FROM api_keys WHERE id = $1 AND revoked_at IS NULL;

-- tenantKeyActive
SELECT 1 FROM api_keys WHERE id = $1 AND tenant_id = $2 AND revoked_at IS NULL;

-- lockActiveKey
SELECT 1 FROM api_keys WHERE id = $1 AND revoked_at IS NULL FOR SHARE;

-- listKeys
SELECT id, tenant_id, role, key_prefix, label, created_at, revoked_at FROM api_keys
     WHERE ($1::text IS NULL OR tenant_id = $1) ORDER BY tenant_id NULLS FIRST, created_at, id;

-- activeKeysByIdOrPrefix
SELECT id, tenant_id, role, key_prefix, label, created_at, revoked_at FROM api_keys
     WHERE (id = $1 OR key_prefix = $1) AND revoked_at IS NULL ORDER BY id;
