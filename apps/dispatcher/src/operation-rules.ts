import type { OperationEntity, TenantSettings } from '@verity/persistence';

/** An operation needs approval when the agent asked for it, or the tenant's policy says so (payments above X). */
export function needsApproval(op: OperationEntity, settings: TenantSettings | null | undefined): boolean {
  if (op.requiresApproval) return true;
  const above = settings?.approvalAmountAbove;
  if (typeof above === 'number' && op.connector === 'sandbox.payments') {
    const amount = op.params.amount;
    return typeof amount === 'number' && amount > above;
  }
  return false;
}
