import { DEMO, Stack } from '../support/stack';
import { http } from '../support/http';
import type { WireSchemas } from '@verity/sdk';

/** A problem+json answer: the wire contract's own type. */
type Problem = WireSchemas['Problem'];

/**
 * An http operation's headers are a record of strings: any name, never a number. An approval threshold or a spending
 * cap that reads its amount from one (`headers.x-amount`) can never compare one: the threshold asks approval for every
 * operation that sends the header (a string cannot be compared) and the cap refuses every send as unmeasurable. Such a
 * field is refused as `unknown_amount_field`, as one no params have is — the record was taken for open params (as the
 * `body` is) and the rule accepted.
 */
describe('an amount read from an http header', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'aamthdr', env: {} });
  }, 60_000);
  afterAll(async () => stack?.stop());

  const call = <T>(method: string, path: string, body?: unknown) =>
    http<T>(stack.apiUrl, method, path, { key: DEMO.admin, body });
  const changes = async (kind: string) =>
    (await call<{ data: unknown[] }>('GET', `/v1/admin/changes?kind=${kind}&limit=200`)).body.data.length;

  it.each(['headers.x-amount', 'headers', 'read_back.headers.x-amount'])(
    'is refused as an approval threshold’s and a spending cap’s amount field (%s): 400 unknown_amount_field, nothing written',
    async (field) => {
      const policyBefore = await call('GET', '/v1/admin/policy');
      const settingsBefore = await call('GET', '/v1/admin/connector-settings/http');
      const recorded = { policy: await changes('policy'), settings: await changes('connector_settings') };

      const rule = await call<Problem>('PUT', '/v1/admin/policy', {
        approval_rules: [{ connector: 'http', amount_above: 100, amount_field: field }],
      });
      expect({ status: rule.status, errors: rule.body.errors }).toEqual({
        status: 400,
        errors: [
          {
            field: 'approval_rules[0].amount_field',
            rule: 'unknown_amount_field',
            message: `"${field}" is not a number in the params of http (request)`,
          },
        ],
      });
      const cap = await call<Problem>('PUT', '/v1/admin/connector-settings/http', {
        spending_caps: [{ period: 'day', max_amount: 100, amount_field: field }],
      });
      expect({ status: cap.status, errors: cap.body.errors }).toEqual({
        status: 400,
        errors: [
          {
            field: 'spending_caps[0].amount_field',
            rule: 'unknown_amount_field',
            message: `"${field}" is not a number in the params of http (request)`,
          },
        ],
      });

      expect((await call('GET', '/v1/admin/policy')).body).toEqual(policyBefore.body);
      expect((await call('GET', '/v1/admin/connector-settings/http')).body).toEqual(settingsBefore.body);
      expect({ policy: await changes('policy'), settings: await changes('connector_settings') }).toEqual(recorded);
    },
  );

  it('still takes an amount from the body, which only the operation can tell', async () => {
    const rule = await call('PUT', '/v1/admin/policy', {
      approval_rules: [{ connector: 'http', amount_above: 100, amount_field: 'body.amount' }],
    });
    expect(rule.status).toBe(200);
    const cap = await call('PUT', '/v1/admin/connector-settings/http', {
      spending_caps: [{ period: 'day', max_amount: 100, amount_field: 'body.amount' }],
    });
    expect(cap.status).toBe(200);
  });
});
