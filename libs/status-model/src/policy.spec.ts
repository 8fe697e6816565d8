import { TerminalReason } from './operation';
import { HOLD_REASONS, approvalRuleFor, paramAt } from './policy';

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
