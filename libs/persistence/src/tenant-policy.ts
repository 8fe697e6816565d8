import { newId } from '@verity/platform';
import { TENANT_APPROVAL_KEYS } from '@verity/status-model';
import { ADMIN_CHANGE_INSERT_COLUMNS } from './admin-changes';
import type { TenantSettings } from './entities';
import { Queryable, rows } from './sql';

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

export const TENANT_POLICY_SQL = {
  settings: `SELECT settings FROM tenants WHERE id = $1`,
  // The keys given are set, the keys in $2 dropped, every other setting stays; the history row ($4 its id, $5 who)
  // is written by the same statement. The row is locked first (the subquery), so `before` is the version this
  // statement changes, also when a concurrent change committed while it waited. No tenant row: nothing written.
  updatePolicy: `WITH changed AS (
       UPDATE tenants t SET settings = (coalesce(t.settings, '{}'::jsonb) - $2::text[]) || $3::jsonb
       FROM (SELECT id, settings FROM tenants WHERE id = $1 FOR NO KEY UPDATE) prior
       WHERE t.id = prior.id
       RETURNING prior.settings AS before, t.settings AS after
     ), recorded AS (
       INSERT INTO admin_changes (${ADMIN_CHANGE_INSERT_COLUMNS})
       SELECT $4, $1, 'policy', NULL, $5, ${policySnapshotOf('changed.before')}, ${policySnapshotOf('changed.after')}
       FROM changed
     )
     SELECT after AS settings FROM changed`,
} as const;

export async function loadTenantSettings(db: Queryable, tenantId: string): Promise<TenantSettings | null> {
  const [row] = await rows<{ settings: TenantSettings | null }>(db, TENANT_POLICY_SQL.settings, [tenantId]);
  return row ? (row.settings ?? {}) : null;
}

/**
 * One statement: the keys given are set, the keys in `remove` are dropped, every other setting stays (a concurrent
 * write of another key is not erased), and the change is recorded in the history of admin changes (`by`, the policy
 * before and after). Returns the settings as written, or null if the tenant does not exist (nothing is recorded).
 */
export async function updateTenantPolicy(
  db: Queryable,
  tenantId: string,
  input: { set: TenantPolicySettings; remove: (keyof TenantPolicySettings)[]; by: string },
): Promise<TenantSettings | null> {
  const set = { ...input.set, policyUpdatedAt: new Date().toISOString(), policyUpdatedBy: input.by };
  const [row] = await rows<{ settings: TenantSettings }>(db, TENANT_POLICY_SQL.updatePolicy, [
    tenantId,
    input.remove,
    JSON.stringify(set),
    newId('chg'),
    input.by,
  ]);
  return row?.settings ?? null;
}
