import type { AllowedHostRow, SpendingCapRow } from './entities/connector-settings.entity';
import { SecretsCipher, secretBinding } from './secrets-cipher';
import { Queryable, rows } from './sql';

/** A tenant admin's writes and reads of its connector settings (allowlist, caps, secret names). Tenant-scoped. */
export const CONNECTOR_SETTINGS_SQL = {
  // An absent list keeps what is stored; a new row starts with none.
  upsertSettings: `INSERT INTO tenant_connector_settings (tenant_id, connector, allow_hosts, spending_caps, updated_by)
     VALUES ($1, $2, coalesce($3::jsonb, '[]'), coalesce($4::jsonb, '[]'), $5)
     ON CONFLICT (tenant_id, connector) DO UPDATE SET
       allow_hosts = coalesce($3::jsonb, tenant_connector_settings.allow_hosts),
       spending_caps = coalesce($4::jsonb, tenant_connector_settings.spending_caps),
       updated_by = $5,
       -- The row's version (the send guard's settings_changed): moved only by a change, not by a write of the same values.
       updated_at = CASE WHEN (coalesce($3::jsonb, tenant_connector_settings.allow_hosts),
                               coalesce($4::jsonb, tenant_connector_settings.spending_caps))
                              IS DISTINCT FROM (tenant_connector_settings.allow_hosts,
                                                tenant_connector_settings.spending_caps)
                         THEN now() ELSE tenant_connector_settings.updated_at END`,
  upsertSecret: `INSERT INTO tenant_connector_secrets (tenant_id, connector, name, value, updated_by) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (tenant_id, connector, name) DO UPDATE SET value = $4, updated_by = $5, updated_at = now()`,
  deleteSecret: `DELETE FROM tenant_connector_secrets WHERE tenant_id = $1 AND connector = $2 AND name = $3 RETURNING name`,
  deleteSecrets: `DELETE FROM tenant_connector_secrets WHERE tenant_id = $1 AND connector = $2`,
  deleteSettings: `DELETE FROM tenant_connector_settings WHERE tenant_id = $1 AND connector = $2`,
  settingsMeta: `SELECT updated_at, updated_by FROM tenant_connector_settings WHERE tenant_id = $1 AND connector = $2`,
  secretNames: `SELECT name FROM tenant_connector_secrets WHERE tenant_id = $1 AND connector = $2 ORDER BY name`,
} as const;

/** Sets the lists given (undefined: keep the stored one), and who changed them. */
export async function upsertConnectorSettings(
  db: Queryable,
  tenantId: string,
  connector: string,
  input: { allowHosts?: AllowedHostRow[]; spendingCaps?: SpendingCapRow[]; by: string },
): Promise<void> {
  await rows(db, CONNECTOR_SETTINGS_SQL.upsertSettings, [
    tenantId,
    connector,
    input.allowHosts === undefined ? null : JSON.stringify(input.allowHosts),
    input.spendingCaps === undefined ? null : JSON.stringify(input.spendingCaps),
    input.by,
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
