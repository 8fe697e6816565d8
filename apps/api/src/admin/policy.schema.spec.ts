import { z } from 'zod';
import { ApprovalRuleSchema, PolicyInputSchema } from './policy.schema';
import { ResolveBody } from '../schemas';
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

describe("an approval rule's threshold", () => {
  it("is bounded as a spending cap's amount is (1e15): 1e300 is one too_big, not a line nothing ever crosses", () => {
    const rule = { connector: 'sandbox.payments' };
    expect(issues({ ...rule, amount_above: 1e300 })).toEqual({ amount_above: 'too_big' });
    expect(issues({ ...rule, amount_above: 1e15 + 2 })).toEqual({ amount_above: 'too_big' });
    expect(ApprovalRuleSchema.parse({ ...rule, amount_above: 1e15 })).toEqual({ ...rule, amount_above: 1e15 });
  });
});

describe('a due time in seconds', () => {
  // The first message is the one a problem's detail shows: for 1e20 it is the range, not "whole seconds".
  const firstMessage = (schema: z.ZodType, input: unknown) => schema.safeParse(input).error?.issues[0]?.message;

  it.each([
    [
      'the policy’s obligation_due_seconds',
      PolicyInputSchema,
      (v: unknown) => ({ obligation_due_seconds: { default: v } }),
    ],
    [
      'a resolution’s due_in_seconds',
      ResolveBody,
      (v: unknown) => ({ status: 'MANUAL_REVIEW', evidence: 'x', due_in_seconds: v }),
    ],
  ])('%s: a number past the range is told the range, a fraction is told whole seconds', (_, schema, body) => {
    expect(firstMessage(schema, body(1e20))).toMatch(/^at most /);
    expect(firstMessage(schema, body(0))).toBe('at least 1 second');
    expect(firstMessage(schema, body(1.5))).toBe('whole seconds');
    expect(schema.safeParse(body(60)).success).toBe(true);
  });
});
