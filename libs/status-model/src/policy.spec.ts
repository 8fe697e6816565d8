import { OperationStatus, TerminalReason } from './operation';
import {
  DENIAL,
  HOLD_REASONS,
  approvalPolicyOf,
  approvalRuleFor,
  needsApproval,
  paramAt,
  tenantApprovalRules,
} from './policy';

describe('approval rules', () => {
  const payments = { connector: 'sandbox.payments', amount_above: 5000 };

  it('asks for approval above the threshold only, strictly', () => {
    expect(approvalRuleFor({ connector: 'sandbox.payments', params: { amount: 6000 } }, [payments])).toBe(payments);
    expect(approvalRuleFor({ connector: 'sandbox.payments', params: { amount: 5000 } }, [payments])).toBeNull();
    expect(approvalRuleFor({ connector: 'sandbox.payments', params: { amount: 10 } }, [payments])).toBeNull();
  });

  it('applies to its connector only', () => {
    expect(approvalRuleFor({ connector: 'sandbox.sms', params: { amount: 9999 } }, [payments])).toBeNull();
  });

  it('a rule without a threshold asks for every operation of the connector', () => {
    const all = { connector: 'sandbox.sms' };
    expect(approvalRuleFor({ connector: 'sandbox.sms', params: {} }, [payments, all])).toBe(all);
  });

  it('reads the amount at a dot path, and ignores an operation without a numeric amount there', () => {
    const nested = { connector: 'http', amount_above: 100, amount_field: 'body.total' };
    expect(approvalRuleFor({ connector: 'http', params: { body: { total: 101 } } }, [nested])).toBe(nested);
    expect(approvalRuleFor({ connector: 'http', params: { body: { total: '101' } } }, [nested])).toBeNull();
    expect(approvalRuleFor({ connector: 'http', params: { body: [101] } }, [nested])).toBeNull();
    expect(approvalRuleFor({ connector: 'http', params: {} }, [nested])).toBeNull();
  });

  it('no rules, no approval', () => {
    expect(approvalRuleFor({ connector: 'sandbox.payments', params: { amount: 1e9 } }, [])).toBeNull();
  });

  it('paramAt walks objects only', () => {
    expect(paramAt({ a: { b: 1 } }, 'a.b')).toBe(1);
    expect(paramAt({ a: null }, 'a.b')).toBeUndefined();
  });
});

describe('hold reasons', () => {
  it('are exactly the reasons a MANUAL_REVIEW can carry', () => {
    expect([...HOLD_REASONS].sort()).toEqual(
      [
        TerminalReason.CONNECTOR_ERROR,
        TerminalReason.FIELD_MISSING,
        TerminalReason.INTEGRITY_MISMATCH,
        TerminalReason.KNOWLEDGE_CONFLICT,
        TerminalReason.SOURCE_UNREACHABLE,
        TerminalReason.STALE_REPLICA,
      ].sort(),
    );
  });
});

describe('a tenant approval policy', () => {
  const declarations = [{ connector: 'pay', amountField: 'total' }];

  it('uses the tenant rules when it has any, and ignores the older threshold then', () => {
    const rules = [{ connector: 'sms' }];
    expect(tenantApprovalRules({ approvalRules: rules, approvalAmountAbove: 10 }, declarations)).toEqual(rules);
  });

  it('applies the older threshold to every connector that declares where its amount is', () => {
    expect(tenantApprovalRules({ approvalAmountAbove: 10 }, declarations)).toEqual([
      { connector: 'pay', amount_above: 10, amount_field: 'total' },
    ]);
    expect(tenantApprovalRules({ approvalAmountAbove: 10 }, [])).toEqual([]);
  });

  it('has no rules without settings', () => {
    expect(tenantApprovalRules(null, declarations)).toEqual([]);
    expect(tenantApprovalRules({}, declarations)).toEqual([]);
  });

  it('needs approval when the agent asked for it or a rule says so', () => {
    const rules = tenantApprovalRules({ approvalAmountAbove: 10 }, declarations);
    expect(needsApproval({ requiresApproval: true, connector: 'sms', params: {} }, rules)).toBe(true);
    expect(needsApproval({ requiresApproval: false, connector: 'pay', params: { total: 11 } }, rules)).toBe(true);
    expect(needsApproval({ requiresApproval: false, connector: 'pay', params: { total: 10 } }, rules)).toBe(false);
    expect(needsApproval({ requiresApproval: false, connector: 'sms', params: { total: 99 } }, rules)).toBe(false);
  });

  it('is judged from the approval keys alone: every key the rules are read from, null where unset', () => {
    const rules = [{ connector: 'sms' }];
    expect(approvalPolicyOf({ approvalRules: rules, approvalAmountAbove: 10 })).toEqual({
      approvalRules: rules,
      approvalAmountAbove: 10,
    });
    expect(approvalPolicyOf(null)).toEqual({ approvalRules: null, approvalAmountAbove: null });
    expect(approvalPolicyOf({})).toEqual(approvalPolicyOf(undefined));
    // Other settings (an obligation's owner) are no part of it; each key the rules are read from is.
    const other = { obligationOwner: 'ops' } as Parameters<typeof approvalPolicyOf>[0];
    expect(approvalPolicyOf(other)).toEqual(approvalPolicyOf({}));
    for (const settings of [{ approvalRules: rules }, { approvalAmountAbove: 10 }]) {
      expect(tenantApprovalRules(settings, declarations)).not.toEqual(tenantApprovalRules({}, declarations));
      expect(approvalPolicyOf(settings)).not.toEqual(approvalPolicyOf({}));
    }
  });

  it('cancels a denied operation for its own reason', () => {
    expect(DENIAL).toEqual({ to: OperationStatus.CANCELLED, reason: TerminalReason.DENIED });
  });
});
