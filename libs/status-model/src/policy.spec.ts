import { OperationStatus, TerminalReason } from './operation';
import {
  DENIAL,
  HOLD_REASONS,
  TENANT_APPROVAL_KEYS,
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

  it('is read from the approval keys alone: the keys the send guard compares are those the rules are read from', () => {
    const read = new Set<string>();
    const recording = (settings: Record<string, unknown>) =>
      new Proxy(settings, {
        get(target, key) {
          if (typeof key === 'string') read.add(key);
          return Reflect.get(target, key) as unknown;
        },
      });
    // Every path through the rules: none set, the older threshold, rules (which replace the threshold).
    for (const settings of [{}, { approvalAmountAbove: 10 }, { approvalRules: [{ connector: 'sms' }] }]) {
      tenantApprovalRules(recording(settings), declarations);
    }
    expect([...read].sort()).toEqual([...TENANT_APPROVAL_KEYS].sort());
  });

  it('cancels a denied operation for its own reason', () => {
    expect(DENIAL).toEqual({ to: OperationStatus.CANCELLED, reason: TerminalReason.DENIED });
  });
});
