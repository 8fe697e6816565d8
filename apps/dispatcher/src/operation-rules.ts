import type { ConnectorRegistry } from '@verity/connectors';
import type { OperationEntity, TenantSettings } from '@verity/persistence';
import {
  ApprovalRuleMatch,
  approvalRuleMatch,
  needsApproval as policyNeedsApproval,
  tenantApprovalRules,
} from '@verity/status-model';

/**
 * The status model's approval rule, applied with the tenant's policy and the connectors' declarations (where an
 * operation's amount is, for a tenant's plain threshold).
 */
export function needsApproval(
  op: OperationEntity,
  settings: TenantSettings | null | undefined,
  connectors: Pick<ConnectorRegistry, 'approvalAmountDeclarations'>,
): boolean {
  return policyNeedsApproval(op, tenantApprovalRules(settings, connectors.approvalAmountDeclarations()));
}

/** Which of the tenant's approval rules asks for approval of this operation, and why (null: none does). */
export function approvalRuleMatchOf(
  op: OperationEntity,
  settings: TenantSettings | null | undefined,
  connectors: Pick<ConnectorRegistry, 'approvalAmountDeclarations'>,
): ApprovalRuleMatch | null {
  return approvalRuleMatch(op, tenantApprovalRules(settings, connectors.approvalAmountDeclarations()));
}
