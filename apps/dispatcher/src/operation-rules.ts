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

/**
 * I15: an irreversible operation whose agent stated what the source must hold (expected_state) is never sent without
 * that state having been read. (No built-in connector declares a context read that is required by itself.)
 */
export function mustReadPrecondition(op: Pick<OperationEntity, 'irreversible' | 'expectedState'>): boolean {
  return op.irreversible && op.expectedState !== null && Object.keys(op.expectedState).length > 0;
}
