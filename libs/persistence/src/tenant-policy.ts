import { newId } from '@verity/platform';
import { TENANT_APPROVAL_KEYS } from '@verity/status-model';
import { ADMIN_CHANGE_INSERT_COLUMNS, VersionCondition, versionConditionHolds } from './admin-changes';
import { requireActiveKey } from './api-keys';
import type { TenantSettings } from './entities';
import { Queryable, isoInstant, rows, withinTransaction } from './sql';

/** The policy keys of a tenant's settings; writing a policy touches these and nothing else. */
export type TenantPolicySettings = Pick<
  TenantSettings,
  'obligationOwner' | 'escalationTarget' | 'obligationDueSeconds' | 'approvalRules' | 'approvalAmountAbove'
>;

/**
 * A tenant row's approval policy as stored (the approval keys of its settings, as JSON text; null: no row), read with
 * the tenant by the workers and compared by the statement that commits SENT (the send guard's
 * `approval_policy_changed`). Read and compared in SQL: a copy parsed into JavaScript and written back could differ
 * from what is stored (a number beyond a double's precision) and refuse every send.
 */
export function approvalPolicyOf(alias: string): string {
  const keys = TENANT_APPROVAL_KEYS.map((key) => `'${key}', ${alias}.settings->'${key}'`).join(', ');
  return `CASE WHEN ${alias}.id IS NOT NULL THEN jsonb_build_object(${keys})::text END`;
}

/**
 * Each policy key of the stored settings, by the name the API gives it (`PUT /v1/admin/policy`): the fields of the
 * policy's entries in the history of admin changes.
 */
export const POLICY_FIELD_NAMES: Readonly<Record<keyof TenantPolicySettings, string>> = {
  obligationOwner: 'obligation_owner',
  escalationTarget: 'escalation_target',
  obligationDueSeconds: 'obligation_due_seconds',
  approvalRules: 'approval_rules',
  approvalAmountAbove: 'approval_amount_above',
};

/** The policy of settings (a jsonb expression) as the history records it: every policy field, null where none is set. */
function policySnapshotOf(settings: string): string {
  const fields = Object.entries(POLICY_FIELD_NAMES).map(([stored, name]) => `'${name}', ${settings}->'${stored}'`);
  return `jsonb_build_object(${fields.join(', ')})`;
}

/**
 * The version of a policy (the `ETag` of `GET /v1/admin/policy`): a digest of its fields as the history records them,
 * so any change of the policy changes it, and only that (a write of the same values keeps it).
 */
function policyVersionOf(settings: string): string {
  return `md5(${policySnapshotOf(settings)}::text)`;
}

export const TENANT_POLICY_SQL = {
  settings: `SELECT settings FROM tenants WHERE id = $1`,
  settingsWithVersion: `SELECT settings, ${policyVersionOf('settings')} AS version FROM tenants WHERE id = $1`,
  // The row locked first (a statement of its own, in the change's transaction): its policy as the history records it
  // and its version, of the row a concurrent change committed while this one waited.
  lockPolicy: `SELECT ${policySnapshotOf('settings')}::text AS before, ${policyVersionOf('settings')} AS version
     FROM tenants WHERE id = $1 FOR NO KEY UPDATE`,
  // The keys given are set, the keys in $2 dropped, every other setting stays; the history row ($4 its id, $5 who,
  // $6 the policy before, as lockPolicy read it) is written by the same statement.
  updatePolicy: `WITH changed AS (
       UPDATE tenants t SET settings = (coalesce(t.settings, '{}'::jsonb) - $2::text[]) || $3::jsonb
         || jsonb_build_object('policyUpdatedAt', ${isoInstant('clock_timestamp()')})
       WHERE t.id = $1
       RETURNING t.settings AS after, ${policyVersionOf('t.settings')} AS version
     ), recorded AS (
       INSERT INTO admin_changes (${ADMIN_CHANGE_INSERT_COLUMNS})
       SELECT $4, $1, 'policy', NULL, $5, $6::jsonb, ${policySnapshotOf('changed.after')}
       FROM changed
     )
     SELECT after AS settings, version FROM changed`,
} as const;

export async function loadTenantSettings(db: Queryable, tenantId: string): Promise<TenantSettings | null> {
  const [row] = await rows<{ settings: TenantSettings | null }>(db, TENANT_POLICY_SQL.settings, [tenantId]);
  return row ? (row.settings ?? {}) : null;
}

/** The tenant's settings and the version of its policy (null: no tenant). */
export async function loadTenantPolicy(
  db: Queryable,
  tenantId: string,
): Promise<{ settings: TenantSettings; version: string } | null> {
  const [row] = await rows<{ settings: TenantSettings | null; version: string }>(
    db,
    TENANT_POLICY_SQL.settingsWithVersion,
    [tenantId],
  );
  return row ? { settings: row.settings ?? {}, version: row.version } : null;
}

type PolicyChange = { set: TenantPolicySettings; remove: (keyof TenantPolicySettings)[]; by: string };

/**
 * One statement: the keys given are set, the keys in `remove` are dropped, every other setting stays (a concurrent
 * write of another key is not erased), and the change is recorded in the history of admin changes (`by`, the policy
 * before and after). Returns the settings as written, or null if the tenant does not exist (nothing is recorded).
 */
export async function updateTenantPolicy(
  db: Queryable,
  tenantId: string,
  input: PolicyChange,
): Promise<TenantSettings | null> {
  const changed = await changeTenantPolicy(db, tenantId, input);
  return 'settings' in changed ? changed.settings : null;
}

/**
 * updateTenantPolicy, made only if the policy is still at one of `ifMatch` (its versions, as loadTenantPolicy gives
 * them; undefined: whatever it is) and at none of `ifNoneMatch` when the statement locks it. `stale`: it was not, nothing was written; `not_found`:
 * no such tenant. The settings as written and their version otherwise.
 */
export async function changeTenantPolicy(
  db: Queryable,
  tenantId: string,
  input: PolicyChange & VersionCondition,
): Promise<{ settings: TenantSettings; version: string } | { refused: 'not_found' | 'stale' }> {
  // policyUpdatedAt is stamped by the statement, on the database's clock (the history's), not this host's.
  const set = { ...input.set, policyUpdatedBy: input.by };
  return withinTransaction(db, async (tx) => {
    // Made only while the key that makes it stands (KeyRevokedError otherwise; a revocation waits for this change).
    await requireActiveKey(tx, input.by);
    // Locked first, and compared on the row as locked: of two changes made against one version, one is made.
    const [locked] = await rows<{ before: string; version: string }>(tx, TENANT_POLICY_SQL.lockPolicy, [tenantId]);
    if (!locked) return { refused: 'not_found' as const };
    if (!versionConditionHolds(locked.version, input)) return { refused: 'stale' as const };
    const [row] = await rows<{ settings: TenantSettings; version: string }>(tx, TENANT_POLICY_SQL.updatePolicy, [
      tenantId,
      input.remove,
      JSON.stringify(set),
      newId('chg'),
      input.by,
      locked.before,
    ]);
    return { settings: row.settings, version: row.version };
  });
}
