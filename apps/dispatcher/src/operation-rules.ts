import { OperationEntity, TenantSettings, tenantApprovalRules } from '@verity/persistence';
import { approvalRuleFor } from '@verity/status-model';

/** An operation needs approval when the agent asked for it, or one of the tenant's approval rules says so. */
export function needsApproval(op: OperationEntity, settings: TenantSettings | null | undefined): boolean {
  if (op.requiresApproval) return true;
  return approvalRuleFor(op, tenantApprovalRules(settings)) !== null;
}

/**
 * I15: an irreversible operation whose agent stated what the source must hold (expected_state) is never sent without
 * that state having been read. (No built-in connector declares a context read that is required by itself.)
 */
export function mustReadPrecondition(op: Pick<OperationEntity, 'irreversible' | 'expectedState'>): boolean {
  return op.irreversible && op.expectedState !== null && Object.keys(op.expectedState).length > 0;
}
