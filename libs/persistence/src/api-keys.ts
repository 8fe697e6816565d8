import { createHash, randomBytes } from 'node:crypto';
import { newId } from '@verity/platform/ids';
import { EntityManager } from 'typeorm';
import { ApiKeyEntity, KeyRole, Role, TenantEntity } from './entities';
import { Queryable, rows } from './sql';

/** The Postgres channel a revocation is announced on: every API process listens, and drops its cached keys. */
export const KEY_REVOCATION_CHANNEL = 'verity_keys';

export const API_KEY_SQL = {
  ensureTenant: `INSERT INTO tenants (id, name) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`,
  // The keys CLI's new tenant: a row when this statement made it, none when the id was taken (also by another at once).
  createTenant: `INSERT INTO tenants (id, name) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING RETURNING id`,
  tenantExists: `SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1) AS exists,
       (SELECT count(*)::int FROM tenants) AS tenants`,
  createKey: `INSERT INTO api_keys (id, tenant_id, role, key_hash, key_prefix, label) VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (key_hash) DO NOTHING`,
  // The revocation and its announcement in one statement: the NOTIFY is delivered when, and only when, the revocation
  // commits. Two statements left a gap in which a lost connection committed a revocation no API process heard of.
  revokeKey: `WITH locked AS (
       SELECT id FROM api_keys WHERE (id = $1 OR key_prefix = $1) AND revoked_at IS NULL FOR UPDATE
     ), revoked AS (
       UPDATE api_keys k SET revoked_at = clock_timestamp() FROM locked
       WHERE k.id = locked.id AND k.revoked_at IS NULL RETURNING k.id
     )
     SELECT id, pg_notify('${KEY_REVOCATION_CHANNEL}', id) FROM revoked`,
  // The operator's revocation of one key by its id (keys CLI), with the instant it took effect. Of two at once, the
  // second waits for the first's row lock and then finds it revoked: no row. Both revocations lock the row first and stamp
  // clock_timestamp() once it is theirs: now() — or an UPDATE's own SET, computed before it waits for a lock that only
  // locked the row — is from before the wait for a change made with the key (which holds it FOR SHARE), and the audit
  // would show a key revoked before a change it made.
  revokeKeyById: `WITH locked AS (
       SELECT id FROM api_keys WHERE id = $1 AND revoked_at IS NULL FOR UPDATE
     ), revoked AS (
       UPDATE api_keys k SET revoked_at = clock_timestamp() FROM locked
       WHERE k.id = locked.id AND k.revoked_at IS NULL RETURNING k.id, k.revoked_at
     )
     SELECT id, revoked_at, pg_notify('${KEY_REVOCATION_CHANNEL}', id) FROM revoked`,
  keyRevokedAt: `SELECT revoked_at FROM api_keys WHERE id = $1`,
  listenForRevocations: `LISTEN ${KEY_REVOCATION_CHANNEL}`,
  keyActive: `SELECT 1 FROM api_keys WHERE id = $1 AND revoked_at IS NULL`,
  tenantKeyActive: `SELECT 1 FROM api_keys WHERE id = $1 AND tenant_id = $2 AND revoked_at IS NULL`,
  // FOR SHARE conflicts with the revocation's UPDATE: a revocation under way is waited for (and then refuses), and one
  // that comes later waits for the transaction holding this lock to end.
  lockActiveKey: `SELECT 1 FROM api_keys WHERE id = $1 AND revoked_at IS NULL FOR SHARE`,
  // The hash column is never selected by the listings: nothing that prints them can print it.
  listKeys: `SELECT id, tenant_id, role, key_prefix, label, created_at, revoked_at FROM api_keys
     WHERE ($1::text IS NULL OR tenant_id = $1) ORDER BY tenant_id NULLS FIRST, created_at, id`,
  activeKeysByIdOrPrefix: `SELECT id, tenant_id, role, key_prefix, label, created_at, revoked_at FROM api_keys
     WHERE (id = $1 OR key_prefix = $1) AND revoked_at IS NULL ORDER BY id`,
} as const;

/** A key as the operator's tools list it: never its hash. */
export interface ApiKeyListing {
  id: string;
  tenant_id: string | null;
  role: KeyRole;
  key_prefix: string;
  label: string | null;
  created_at: Date;
  revoked_at: Date | null;
}

export function hashApiKey(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

export function generateApiKey(role: KeyRole): string {
  return `vk_${role}_${randomBytes(24).toString('base64url')}`;
}

/**
 * What is kept of a key in clear, to show and to revoke by: its role part and 8 random characters after it. A fixed
 * 12 characters was exactly `vk_reviewer_` or `vk_operator_` — every such key of every tenant had the same prefix,
 * which could neither tell a leaked key's row nor revoke one (and agent keys kept 3 random characters). A key of
 * another shape (a seeded demo key) keeps its first 12 characters.
 */
export function keyPrefix(key: string): string {
  const rolePart = /^vk_[a-z]+_/.exec(key)?.[0];
  return rolePart ? key.slice(0, rolePart.length + 8) : key.slice(0, 12);
}

export async function ensureTenant(db: EntityManager, id: string, name = id): Promise<TenantEntity> {
  await db.query(API_KEY_SQL.ensureTenant, [id, name]);
  return db.getRepository(TenantEntity).findOneByOrFail({ id });
}

/**
 * Makes the tenant `id` for the keys CLI's `--new-tenant`: true when this call made it, false when a tenant of that id
 * exists (made earlier, or by another call at the same moment).
 */
export async function createTenant(db: Queryable, id: string, name = id): Promise<boolean> {
  return (await rows(db, API_KEY_SQL.createTenant, [id, name])).length > 0;
}

/** Whether the tenant `id` exists, and how many tenants there are (for the keys CLI's refusal of an unknown one). */
export async function tenantExists(db: Queryable, id: string): Promise<{ exists: boolean; tenants: number }> {
  const [row] = await rows<{ exists: boolean; tenants: number }>(db, API_KEY_SQL.tenantExists, [id]);
  return { exists: row.exists, tenants: row.tenants };
}

/** Who a key is for: a role of one tenant, or the platform operator (no tenant). */
export type KeyOwner = { tenantId: string; role: Role } | { tenantId: null; role: 'operator' };

/** Creates a key and returns its only plain-text copy; the database keeps the hash. */
export async function createApiKey(
  db: EntityManager,
  input: KeyOwner & { label?: string; key?: string },
): Promise<{ id: string; key: string }> {
  const key = input.key ?? generateApiKey(input.role);
  const id = newId('key');
  await db.query(API_KEY_SQL.createKey, [
    id,
    input.tenantId,
    input.role,
    hashApiKey(key),
    keyPrefix(key),
    input.label ?? null,
  ]);
  return { id, key };
}

/** Revokes the key and, in the same statement, tells every API process to drop its cached copy of it at once. */
export async function revokeApiKey(db: Queryable, id: string): Promise<boolean> {
  const revoked = await rows(db, API_KEY_SQL.revokeKey, [id]);
  return revoked.length > 0;
}

/**
 * The operator's revocation of the key with this id: when it took effect and whether this call made it
 * (`revokedHere`: false when another revocation committed first, also one made while this one ran — its instant is
 * given); null when there is no such key.
 */
export async function revokeApiKeyById(
  db: Queryable,
  id: string,
): Promise<{ revokedAt: Date; revokedHere: boolean } | null> {
  const [mine] = await rows<{ revoked_at: Date }>(db, API_KEY_SQL.revokeKeyById, [id]);
  if (mine) return { revokedAt: new Date(mine.revoked_at), revokedHere: true };
  const [found] = await rows<{ revoked_at: Date | null }>(db, API_KEY_SQL.keyRevokedAt, [id]);
  return found?.revoked_at ? { revokedAt: new Date(found.revoked_at), revokedHere: false } : null;
}

export async function findActiveKey(db: EntityManager, key: string): Promise<ApiKeyEntity | null> {
  const found = await db.getRepository(ApiKeyEntity).findOneBy({ keyHash: hashApiKey(key) });
  return found && !found.revokedAt ? found : null;
}

/** Whether the key (by id) is still unrevoked: an open stream asks this now and then. */
export async function isKeyActive(db: Queryable, keyId: string): Promise<boolean> {
  const found = await rows(db, API_KEY_SQL.keyActive, [keyId]);
  return found.length === 1;
}

/**
 * Whether the key that granted an approval (`decided_by`) still stands, as the send guard judges it (a key of the
 * operation's tenant, unrevoked): a grant by a revoked key is withdrawn before the send. A grant that names no key: true.
 */
export async function grantKeyStands(db: Queryable, tenantId: string, decidedBy: string | undefined): Promise<boolean> {
  if (decidedBy === undefined) return true;
  const found = await rows(db, API_KEY_SQL.tenantKeyActive, [decidedBy, tenantId]);
  return found.length === 1;
}

/**
 * Inside a transaction that a key's request writes: whether the key is still unrevoked, share-locking
 * its row until the transaction ends, so no revocation commits between this check and the write. A request admitted
 * before its key was revoked (a lookup cached, a revocation still on its way by NOTIFY, or one made while the request
 * ran) writes nothing once the revocation has committed.
 */
export async function lockActiveKey(db: Queryable, keyId: string): Promise<boolean> {
  const found = await rows(db, API_KEY_SQL.lockActiveKey, [keyId]);
  return found.length === 1;
}

/** The key that makes a change was revoked before the change could be written (requireActiveKey): nothing was. */
export class KeyRevokedError extends Error {
  override readonly name = 'KeyRevokedError';
  constructor(readonly keyId: string) {
    super(`the key ${keyId} was revoked before the change was written`);
  }
}

/**
 * lockActiveKey for a change recorded as made `by` a key (the admin's setting changes and their history): throws
 * KeyRevokedError when the key no longer stands, and otherwise holds its row share-locked until the transaction ends.
 */
export async function requireActiveKey(tx: Queryable, keyId: string): Promise<void> {
  if (!(await lockActiveKey(tx, keyId))) throw new KeyRevokedError(keyId);
}

/** The operator's listing (keys CLI), of one tenant or of all. */
export function listApiKeys(db: Queryable, tenantId: string | null): Promise<ApiKeyListing[]> {
  return rows<ApiKeyListing>(db, API_KEY_SQL.listKeys, [tenantId]);
}

/** Unrevoked keys with this id or key prefix (a prefix may be shared). For the operator's CLI. */
export function findActiveKeysByIdOrPrefix(db: Queryable, target: string): Promise<ApiKeyListing[]> {
  return rows<ApiKeyListing>(db, API_KEY_SQL.activeKeysByIdOrPrefix, [target]);
}

/**
 * The `application_name` of an API process' LISTEN connection (key revocations, secret changes): how an operator, or a
 * test, finds that session in `pg_stat_activity` whatever statement it ran last (its freshness round trip is a
 * `SELECT 1`).
 */
export const LISTEN_APPLICATION_NAME = 'verity-api-listen';

/**
 * Subscribes a dedicated connection (not one of the pool's) to key revocations; its `notification` events on
 * KEY_REVOCATION_CHANNEL then say "drop cached keys".
 */
export async function listenForKeyRevocations(connection: { query(sql: string): Promise<unknown> }): Promise<void> {
  await connection.query(API_KEY_SQL.listenForRevocations);
}

/**
 * The documented demo keys (README): seeded only by the local demo (`npm start`, SEED_DEMO), never in production, so
 * the quick start needs no set-up.
 * `demo-other` exists so tenant isolation can be tried by hand.
 */
export const DEMO_KEYS: ReadonlyArray<KeyOwner & { key: string }> = [
  { tenantId: 'demo', role: 'agent', key: 'demo-agent-key' },
  { tenantId: 'demo', role: 'reviewer', key: 'demo-reviewer-key' },
  { tenantId: 'demo', role: 'admin', key: 'demo-admin-key' },
  { tenantId: 'demo-other', role: 'agent', key: 'demo-other-agent-key' },
  { tenantId: null, role: 'operator', key: 'demo-operator-key' },
];

const DEMO_KEY_HASHES: ReadonlySet<string> = new Set(DEMO_KEYS.map((k) => hashApiKey(k.key)));

/**
 * Whether `key` is one of the published demo keys. Seeding is never undone, so a database the local demo once ran
 * against keeps them: a production API refuses them by this, whatever the database holds.
 */
export function isPublishedDemoKey(key: string): boolean {
  return DEMO_KEY_HASHES.has(hashApiKey(key));
}

export async function seedDemo(db: EntityManager): Promise<void> {
  await ensureTenant(db, 'demo', 'Demo tenant');
  await ensureTenant(db, 'demo-other', 'Another demo tenant');
  for (const k of DEMO_KEYS) await createApiKey(db, { ...k, label: 'demo' });
}
