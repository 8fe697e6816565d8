import { ApprovalRuleSchema } from './policy.schema';
import { issueRules } from '../../../../test/support/zod-issues';

const issues = (input: unknown) => issueRules(ApprovalRuleSchema, input);

describe('an approval rule with a currency', () => {
  const rule = { connector: 'sandbox.payments', amount_above: 10000 };

  it('takes an ISO 4217-shaped code with a threshold, and a currency_field (a dot path) only with a currency', () => {
    expect(ApprovalRuleSchema.parse({ ...rule, currency: 'EUR' })).toEqual({ ...rule, currency: 'EUR' });
    expect(ApprovalRuleSchema.parse({ ...rule, currency: 'EUR', currency_field: 'money.ccy' })).toMatchObject({
      currency_field: 'money.ccy',
    });
    for (const currency of ['eur', 'EURO', 'E1R', '', 978, null]) {
      expect([currency, issues({ ...rule, currency })]).toEqual([currency, { currency: expect.any(String) }]);
    }
    expect(issues({ ...rule, currency: 'Eur' })).toEqual({ currency: 'invalid_format' });
    expect(issues({ ...rule, currency_field: 'currency' })).toEqual({ currency_field: 'requires_currency' });
    expect(issues({ ...rule, currency: 'EUR', currency_field: 'a..b' })).toEqual({ currency_field: 'invalid_format' });
    expect(issues({ connector: 'sandbox.payments', currency: 'EUR' })).toEqual({ currency: 'requires_amount_above' });
  });
});
