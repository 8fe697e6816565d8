import { TENANT_APPROVAL_KEYS } from '@verity/status-model';
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

export const TENANT_POLICY_SQL = {
  settings: `SELECT settings FROM tenants WHERE id = $1`,
  // The keys given are set, the keys in $2 dropped, every other setting stays.
  updatePolicy: `UPDATE tenants SET settings = (coalesce(settings, '{}'::jsonb) - $2::text[]) || $3::jsonb
     WHERE id = $1 RETURNING settings`,
} as const;

export async function loadTenantSettings(db: Queryable, tenantId: string): Promise<TenantSettings | null> {
  const [row] = await rows<{ settings: TenantSettings | null }>(db, TENANT_POLICY_SQL.settings, [tenantId]);
  return row ? (row.settings ?? {}) : null;
}

/**
 * One statement: the keys given are set, the keys in `remove` are dropped, every other setting stays (a concurrent
 * write of another key is not erased). Returns the settings as written, or null if the tenant does not exist.
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
  ]);
  return row?.settings ?? null;
}
