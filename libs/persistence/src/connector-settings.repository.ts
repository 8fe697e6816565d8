import { newId } from '@verity/platform';
import type { EntityManager } from 'typeorm';
import { ADMIN_CHANGE_INSERT_COLUMNS, VersionCondition, versionConditionHolds } from './admin-changes';
import { requireActiveKey } from './api-keys';
import {
  lockSpendingCaps,
  type AllowedHostRow,
  type ReadBackBindingRow,
  type SpendingCapRow,
} from './entities/connector-settings.entity';
import { SecretsCipher, secretBinding } from './secrets-cipher';
import { Queryable, rows } from './sql';

/**
 * One connector's settings ($1 tenant, $2 connector) as the history of admin changes records them: the allowlist, the
 * caps, the read-back binding and the NAMES of the secrets — what `GET /v1/admin/connector-settings/{connector}` shows,
 * never a secret's value. The settings row is read once (no row: none of each, and `declared`).
 */
const SETTINGS_SNAPSHOT = `(SELECT jsonb_build_object(
       'allow_hosts', coalesce(s.allow_hosts, '[]'::jsonb),
       'spending_caps', coalesce(s.spending_caps, '[]'::jsonb),
       'read_back_binding', coalesce(s.read_back_binding, 'declared'),
       'secrets', coalesce((SELECT jsonb_agg(x.name ORDER BY x.name) FROM tenant_connector_secrets x
                            WHERE x.tenant_id = $1 AND x.connector = $2), '[]'::jsonb))
     FROM (VALUES (1)) AS one
     LEFT JOIN tenant_connector_settings s ON s.tenant_id = $1 AND s.connector = $2)`;

/**
 * The settings as the history of admin changes records them: SETTINGS_SNAPSHOT (`settings`: the expression, or a
 * column that holds it already) and, by name, when each secret was last written (`secrets_written_at`). A rotation — a
 * new value under a name that stays — leaves the names as they were, so without it the entry of a rotation read
 * exactly as a write that changed nothing: who replaced which credential, and when, was nowhere. Never anything of the
 * value (no digest a guess could be tested against: a write of the same value moves the time too). Not part of the
 * version's snapshot text (SECRET_WRITES already moves it): ETags stay as they were.
 */
const historySnapshotOf = (settings: string) => `(${settings} || jsonb_build_object(
       'secrets_written_at', coalesce((SELECT jsonb_object_agg(x.name, to_char(x.updated_at AT TIME ZONE 'UTC',
                                                                         'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
                                       FROM tenant_connector_secrets x
                                       WHERE x.tenant_id = $1 AND x.connector = $2), '{}'::jsonb)))`;

/**
 * When each secret of the connector ($1 tenant, $2 connector) was last written, by name (null: it has none): part of the
 * settings' version, so a rotation — a new value under a name that stays — moves it as any other change does, while
 * nothing of the value goes into it (no digest a guess could be tested against: a write of the same value moves it too).
 */
const SECRET_WRITES = `(SELECT string_agg(x.name || '@' || (extract(epoch FROM x.updated_at) * 1000000)::bigint::text, ','
                               ORDER BY x.name)
     FROM tenant_connector_secrets x WHERE x.tenant_id = $1 AND x.connector = $2)`;

/** A connector's settings version: a digest of the settings as shown (`snapshot`, as text) and of its secrets' writes. */
const settingsVersionOf = (snapshot: string) => `md5(${snapshot} || coalesce(chr(31) || ${SECRET_WRITES}, ''))`;

/**
 * The Postgres channel a change of a tenant's secrets (set, replaced, deleted) is announced on, with the tenant's id: every
 * API process listens, and drops the secret values it kept for that tenant (what its answers are looked through for).
 */
export const TENANT_SECRETS_CHANNEL = 'verity_tenant_secrets';

/** A tenant admin's writes and reads of its connector settings (allowlist, caps, secret names). Tenant-scoped. */
export const CONNECTOR_SETTINGS_SQL = {
  // An absent setting ($3, $4, $6 null) keeps what is stored; a new row starts with none (and `declared`).
  upsertSettings: `INSERT INTO tenant_connector_settings (tenant_id, connector, allow_hosts, spending_caps, updated_by,
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
                         THEN now() ELSE tenant_connector_settings.updated_at END`,
  // Stamped by the clock when written (not the transaction's start): a rotation that waited for another one's turn is
  // always later than it, so the settings' version moves with each.
  // Every change of a tenant's secrets announces itself in the same statement (TENANT_SECRETS_CHANNEL, the tenant's id):
  // the NOTIFY is delivered when, and only when, the change commits, and every API process drops the values it kept.
  upsertSecret: `WITH written AS (
       INSERT INTO tenant_connector_secrets (tenant_id, connector, name, value, updated_by, updated_at)
       VALUES ($1, $2, $3, $4, $5, clock_timestamp())
       ON CONFLICT (tenant_id, connector, name) DO UPDATE SET value = $4, updated_by = $5, updated_at = clock_timestamp()
       RETURNING tenant_id
     )
     SELECT pg_notify('${TENANT_SECRETS_CHANNEL}', tenant_id) FROM written`,
  deleteSecret: `WITH deleted AS (
       DELETE FROM tenant_connector_secrets WHERE tenant_id = $1 AND connector = $2 AND name = $3 RETURNING tenant_id, name
     )
     SELECT name, pg_notify('${TENANT_SECRETS_CHANNEL}', tenant_id) FROM deleted`,
  deleteSecrets: `WITH deleted AS (
       DELETE FROM tenant_connector_secrets WHERE tenant_id = $1 AND connector = $2 RETURNING tenant_id
     )
     SELECT pg_notify('${TENANT_SECRETS_CHANNEL}', $1) WHERE EXISTS (SELECT 1 FROM deleted)`,
  listenForSecretChanges: `LISTEN ${TENANT_SECRETS_CHANNEL}`,
  // On the LISTEN connection: answered after every notification committed before it was sent (see heardSoFar).
  heardSoFar: `SELECT 1`,
  deleteSettings: `DELETE FROM tenant_connector_settings WHERE tenant_id = $1 AND connector = $2`,
  settingsMeta: `SELECT updated_at, updated_by FROM tenant_connector_settings WHERE tenant_id = $1 AND connector = $2`,
  secretNames: `SELECT name FROM tenant_connector_secrets WHERE tenant_id = $1 AND connector = $2 ORDER BY name`,
  secretCount: `SELECT count(*)::int AS count FROM tenant_connector_secrets WHERE tenant_id = $1 AND connector = $2`,
  // Changes of one (tenant, connector)'s settings take turns (a transaction-scoped lock, taken before anything is read),
  // so each history row's `before` is what the change before it left.
  lockChange: `SELECT pg_advisory_xact_lock(hashtextextended('tenant_connector_settings' || chr(31) || $1 || chr(31) || $2, 0))`,
  // As text: passed back as it is, not through a JavaScript number. With its version (the ETag of the settings): a
  // digest of that text and of when each secret was written, so any change of what GET shows changes it, and so does a
  // secret's rotation (its value is never shown); a write of the same settings does not.
  // `settings` as the history records them (historySnapshotOf), `version` of the settings as shown: both of the
  // settings read once.
  snapshot: `SELECT ${historySnapshotOf('snap.s')}::text AS settings, ${settingsVersionOf('snap.s::text')} AS version
     FROM (SELECT ${SETTINGS_SNAPSHOT} AS s) snap`,
  version: `SELECT ${settingsVersionOf(`${SETTINGS_SNAPSHOT}::text`)} AS version`,
  // $3 the row's id, $4 who, $5 the settings before (the snapshot's text); after: read by this statement.
  recordChange: `INSERT INTO admin_changes (${ADMIN_CHANGE_INSERT_COLUMNS})
     SELECT $3, $1, 'connector_settings', $2, $4, $5::jsonb, ${historySnapshotOf(SETTINGS_SNAPSHOT)}`,
} as const;

/**
 * A change made against a version of the settings (If-Match) found them at another one: nothing was written.
 * `current` is the version they are at.
 */
export class StaleConnectorSettings extends Error {
  override readonly name = 'StaleConnectorSettings';
  constructor(readonly current: string) {
    super(`the connector settings are at version ${current}`);
  }
}

/** The version of a tenant's settings for a connector (what changeConnectorSettings' `ifMatch` names). */
export async function connectorSettingsVersion(db: Queryable, tenantId: string, connector: string): Promise<string> {
  const [row] = await rows<{ version: string }>(db, CONNECTOR_SETTINGS_SQL.version, [tenantId, connector]);
  return row.version;
}

/**
 * One change of a tenant's settings for a connector, recorded in the history of admin changes in the same
 * transaction: `tx` must be a transaction's manager (the caller's, so what it writes besides commits with the row).
 * Changes of the same connector take turns; the settings are read before `write` and after it, and the row is written
 * with them. Should `write` throw (a refusal, a failed statement), the caller's transaction rolls back: no row.
 * `ifMatch`: the versions the change was made against (connectorSettingsVersion), `ifNoneMatch` those it may not be
 * made on; settings whose version fails either throw StaleConnectorSettings before anything is written.
 */
export async function changeConnectorSettings<T>(
  tx: Queryable,
  change: { tenantId: string; connector: string; by: string } & VersionCondition,
  write: () => Promise<T>,
): Promise<T> {
  if (!(tx as Partial<EntityManager>).queryRunner?.isTransactionActive) {
    // Outside a transaction the turn would end with its first statement, and the row could outlive a failed write.
    throw new Error('changeConnectorSettings runs in a transaction (pass the manager `transaction` gives)');
  }
  const { tenantId, connector, by } = change;
  // Every change (a PUT, a secret's delete, a clear) holds the connector's spending-caps lock until it commits: every
  // SENT statement that checks the settings' version reads it only once it holds that lock (shared), so no send commits
  // from settings a change is replacing — a clear left it to the caller, and a send prepared from the allowlist it
  // removed was committed after the clear, the version read from the row the clear had not committed yet. First, in
  // the order a capped send takes its locks (the cap's turn, then rows).
  await lockSpendingCaps(tx, tenantId, connector);
  // Made only while the key that makes it stands (KeyRevokedError otherwise; a revocation waits for this change).
  await requireActiveKey(tx, by);
  await rows(tx, CONNECTOR_SETTINGS_SQL.lockChange, [tenantId, connector]);
  const [before] = await rows<{ settings: string; version: string }>(tx, CONNECTOR_SETTINGS_SQL.snapshot, [
    tenantId,
    connector,
  ]);
  // Read in the turn, after every change before it committed, and every change takes the turn: the version cannot
  // move before this one's commit.
  if (!versionConditionHolds(before.version, change)) {
    throw new StaleConnectorSettings(before.version);
  }
  const result = await write();
  await rows(tx, CONNECTOR_SETTINGS_SQL.recordChange, [tenantId, connector, newId('chg'), by, before.settings]);
  return result;
}

/** Sets the settings given (undefined: keep the stored one), and who changed them. */
export async function upsertConnectorSettings(
  db: Queryable,
  tenantId: string,
  connector: string,
  input: {
    allowHosts?: AllowedHostRow[];
    spendingCaps?: SpendingCapRow[];
    readBackBinding?: ReadBackBindingRow;
    by: string;
  },
): Promise<void> {
  await rows(db, CONNECTOR_SETTINGS_SQL.upsertSettings, [
    tenantId,
    connector,
    input.allowHosts === undefined ? null : JSON.stringify(input.allowHosts),
    input.spendingCaps === undefined ? null : JSON.stringify(input.spendingCaps),
    input.by,
    input.readBackBinding ?? null,
  ]);
}

/** Stores a secret sealed to its (tenant, connector, name), or deletes it when `value` is null. */
export async function writeConnectorSecret(
  db: Queryable,
  secrets: SecretsCipher,
  tenantId: string,
  connector: string,
  name: string,
  value: string | null,
  by: string,
): Promise<void> {
  if (value === null) {
    await deleteConnectorSecret(db, tenantId, connector, name);
    return;
  }
  await rows(db, CONNECTOR_SETTINGS_SQL.upsertSecret, [
    tenantId,
    connector,
    name,
    secrets.seal(value, secretBinding(tenantId, connector, name)),
    by,
  ]);
}

/** How many secrets the tenant holds for the connector (its own writes in `db`'s transaction included). */
export async function connectorSecretCount(db: Queryable, tenantId: string, connector: string): Promise<number> {
  const [row] = await rows<{ count: number }>(db, CONNECTOR_SETTINGS_SQL.secretCount, [tenantId, connector]);
  return row.count;
}

/** Whether there was such a secret. */
export async function deleteConnectorSecret(
  db: Queryable,
  tenantId: string,
  connector: string,
  name: string,
): Promise<boolean> {
  const deleted = await rows(db, CONNECTOR_SETTINGS_SQL.deleteSecret, [tenantId, connector, name]);
  return deleted.length > 0;
}

/** Everything of the tenant's for this connector: secrets, allowlist and caps (the spending ledger is history). */
export async function clearConnectorSettings(db: Queryable, tenantId: string, connector: string): Promise<void> {
  await rows(db, CONNECTOR_SETTINGS_SQL.deleteSecrets, [tenantId, connector]);
  await rows(db, CONNECTOR_SETTINGS_SQL.deleteSettings, [tenantId, connector]);
}

/** When and by whom the settings were last written (null: never), and the names (never the values) of the secrets. */
export async function connectorSettingsMeta(
  db: Queryable,
  tenantId: string,
  connector: string,
): Promise<{ updatedAt: Date | null; updatedBy: string | null; secretNames: string[] }> {
  const [meta] = await rows<{ updated_at: Date; updated_by: string | null }>(db, CONNECTOR_SETTINGS_SQL.settingsMeta, [
    tenantId,
    connector,
  ]);
  const names = await rows<{ name: string }>(db, CONNECTOR_SETTINGS_SQL.secretNames, [tenantId, connector]);
  return {
    updatedAt: meta ? new Date(meta.updated_at) : null,
    updatedBy: meta?.updated_by ?? null,
    secretNames: names.map((n) => n.name),
  };
}

/**
 * Subscribes a dedicated connection (the one that listens for key revocations) to changes of tenants' secrets; its
 * `notification` events on TENANT_SECRETS_CHANNEL then say "drop the secret values kept for this tenant".
 */
export async function listenForSecretChanges(connection: { query(sql: string): Promise<unknown> }): Promise<void> {
  await connection.query(CONNECTOR_SETTINGS_SQL.listenForSecretChanges);
}

/**
 * One round trip on the LISTEN connection: when it resolves, every change of tenants' secrets that committed before it
 * was sent has been handed to the connection's `notification` events. The committing session signals the listening one
 * before the change is answered, and Postgres sends a listening session's pending notifications before it reports a
 * statement done; pg emits them, in the order received, before the statement's promise resolves.
 */
export async function heardSoFar(connection: { query(sql: string): Promise<unknown> }): Promise<void> {
  await connection.query(CONNECTOR_SETTINGS_SQL.heardSoFar);
}
