import { ConnectorSettingsInputSchema, SECRET_VALUE_MIN_LENGTH, SpendingCapSchema, capAmount } from './tenant-settings';
import { issueRules } from '../../../test/support/zod-issues';

const issues = (input: unknown) => issueRules(SpendingCapSchema, input);

describe('a spending cap with a currency', () => {
  const cap = { period: 'day', max_amount: 1000, amount_field: 'amount' };

  it('takes an ISO 4217-shaped code, and a currency_field only with a currency', () => {
    expect(SpendingCapSchema.parse({ ...cap, currency: 'EUR' })).toEqual({ ...cap, currency: 'EUR' });
    expect(SpendingCapSchema.parse({ ...cap, currency: 'EUR', currency_field: '$.money.ccy' })).toMatchObject({
      currency_field: '$.money.ccy',
    });
    for (const currency of ['eur', 'EURO', 'EU', 'E1R', '', 978, null]) {
      expect([currency, issues({ ...cap, currency })]).toEqual([currency, { currency: expect.any(String) }]);
    }
    expect(issues({ ...cap, currency: 'eur' })).toEqual({ currency: 'invalid_format' });
    expect(issues({ ...cap, currency_field: 'currency' })).toEqual({ currency_field: 'requires_currency' });
    expect(issues({ ...cap, currency: 'EUR', currency_field: 'a..b' })).toEqual({ currency_field: 'invalid_format' });
    expect(issues({ period: 'day', max_operations: 5, currency: 'EUR' })).toEqual({ currency: 'requires_max_amount' });
  });

  it('capAmount: the amount, and whether the operation is in another currency than the cap', () => {
    const eur = { ...cap, currency: 'EUR' };
    expect(capAmount({ amount: 500, currency: 'EUR' }, eur)).toEqual({ path: ['amount'], amount: 500 });
    expect(capAmount({ amount: 500, currency: 'KWD' }, eur)).toEqual({
      path: ['amount'],
      amount: 500,
      currencyMismatch: { field: 'currency', found: 'KWD' },
    });
    expect(capAmount({ amount: 500 }, eur)?.currencyMismatch).toEqual({ field: 'currency', found: undefined });
    expect(capAmount({ amount: 500, currency: 978 }, eur)?.currencyMismatch).toEqual({ field: 'currency', found: 978 });
    const nested = { ...eur, amount_field: 'body.lines[0].amount', currency_field: '$.body.ccy' };
    expect(capAmount({ body: { lines: [{ amount: 5 }], ccy: 'EUR' } }, nested)).toEqual({
      path: ['body', 'lines', '0', 'amount'],
      amount: 5,
    });
    expect(capAmount({ body: { lines: [{ amount: 5 }], ccy: 'USD' } }, nested)?.currencyMismatch).toEqual({
      field: '$.body.ccy',
      found: 'USD',
    });
    // Without a currency, the currency is not read (amounts of any currency are one unit, as before).
    expect(capAmount({ amount: 500, currency: 'KWD' }, cap)).toEqual({ path: ['amount'], amount: 500 });
  });
});

describe('a spending cap with amount_decimals (the places the target charges in)', () => {
  const cents = { period: 'day', max_amount: 1000, amount_field: 'amount', amount_decimals: 2 };

  it('is a whole number from 0 to 8, only with max_amount', () => {
    expect(SpendingCapSchema.parse(cents)).toEqual(cents);
    expect(issues({ ...cents, amount_decimals: 0 })).toEqual({});
    for (const amount_decimals of [-1, 9, 1.5, '2', null]) {
      expect([amount_decimals, issues({ ...cents, amount_decimals })]).toEqual([
        amount_decimals,
        { amount_decimals: expect.any(String) },
      ]);
    }
    expect(issues({ period: 'day', max_operations: 5, amount_decimals: 2 })).toEqual({
      amount_decimals: 'requires_max_amount',
    });
  });

  it('capAmount: an amount with more places than the target charges in is no amount of the cap (a rounded-up charge)', () => {
    const amountOf = (amount: number, cap: Record<string, unknown> = cents) => capAmount({ amount }, cap)?.amount;
    expect([100, 100.01, 0.01, 1e21].map((a) => amountOf(a))).toEqual([100, 100.01, 0.01, 1e21]);
    expect([0.004, 100.005, 1e-7, 5e-324].map((a) => amountOf(a))).toEqual([null, null, null, null]);
    expect(amountOf(12.5, { ...cents, amount_decimals: 0 })).toBeNull();
    // Without amount_decimals, any positive finite amount counts, as before.
    const { amount_decimals: _any, ...anyPlaces } = cents;
    expect(amountOf(0.004, anyPlaces)).toBe(0.004);
  });
});

describe('the amount caps of one connector', () => {
  const cap = (period: string, currency?: string) => ({
    period,
    max_amount: 1000,
    amount_field: 'amount',
    ...(currency ? { currency } : {}),
  });
  const rules = (caps: unknown[]) => Object.values(issueRules(ConnectorSettingsInputSchema, { spending_caps: caps }));

  it('count one currency: two currencies, or one with and one without, would refuse or miscount every amount', () => {
    expect(rules([cap('day', 'EUR'), cap('week', 'USD')])).toEqual(['one_currency']);
    expect(rules([cap('day', 'EUR'), cap('week')])).toEqual(['one_currency']);
    expect(rules([cap('day', 'EUR'), cap('week', 'EUR'), { period: 'month', max_operations: 5 }])).toEqual([]);
    expect(rules([cap('day'), cap('week')])).toEqual([]);
  });
});

describe('the allowlist entries of one connector', () => {
  const rules = (allowHosts: unknown[]) => issueRules(ConnectorSettingsInputSchema, { allow_hosts: allowHosts });

  // A URL falls under the first entry naming its host (egress allowlistEntryOf): a later one it covers never applies.
  it('refuses an entry that can never apply: its host and port already fall under an earlier entry', () => {
    // The same host twice (in any spelling), for every port: the second, with its secrets, is never read.
    expect(rules([{ host: 'api.example.com' }, { host: 'API.example.com', secrets: ['crm_token'] }])).toEqual({
      'allow_hosts.1.host': 'shadowed',
    });
    // A port the earlier entry of the host already takes.
    expect(
      rules([
        { host: 'api.example.com', ports: [443] },
        { host: 'api.example.com', ports: [443, 8443] },
      ]),
    ).toEqual({ 'allow_hosts.1.host': 'shadowed' });
    // A specific host after a wildcard that names it: the wildcard is its first entry, whatever the port.
    expect(rules([{ host: '*.example.com' }, { host: 'api.example.com', allow_private: true }])).toEqual({
      'allow_hosts.1.host': 'shadowed',
    });
    expect(
      rules([
        { host: '*.example.com', ports: [443] },
        { host: '*.api.example.com', ports: [8443] },
      ]),
    ).toEqual({
      'allow_hosts.1.host': 'shadowed',
    });
  });

  it('takes entries that each apply somewhere: per port, the specific before the wildcard, any port after specific ones', () => {
    expect(
      rules([{ host: 'api.example.com', ports: [8443], secrets: ['crm_token'] }, { host: 'api.example.com' }]),
    ).toEqual({});
    expect(
      rules([
        { host: 'api.example.com', ports: [443] },
        { host: 'api.example.com', ports: [8443] },
      ]),
    ).toEqual({});
    expect(rules([{ host: 'api.example.com', secrets: ['crm_token'] }, { host: '*.example.com' }])).toEqual({});
    expect(rules([{ host: '*.api.example.com' }, { host: '*.example.com' }, { host: 'example.com' }])).toEqual({});
    expect(rules([{ host: '10.0.0.5' }, { host: '10.0.0.6' }, { host: '::1' }])).toEqual({});
  });
});

describe('a secret value', () => {
  it('has no leading or trailing space: a header value loses them, so the value sent would not be the one set', () => {
    for (const value of [' tok-0123', 'tok-0123 ', ' '.repeat(8), '  tok-0123  ']) {
      const parsed = ConnectorSettingsInputSchema.safeParse({ secrets: { key: value } });
      expect({ value, success: parsed.success }).toEqual({ value, success: false });
      expect(parsed.error?.issues).toEqual([
        expect.objectContaining({
          path: ['secrets', 'key'],
          message: expect.stringMatching(/leading or trailing spaces/),
        }),
      ]);
    }
    for (const value of ['tok-0123', 'Bearer tok-0123', 'a  b-0123', 'x1234567']) {
      expect(ConnectorSettingsInputSchema.safeParse({ secrets: { key: value } }).success).toBe(true);
    }
  });

  it(`has at least ${SECRET_VALUE_MIN_LENGTH} characters: a shorter one would be found in most texts and answers`, () => {
    expect(SECRET_VALUE_MIN_LENGTH).toBe(8);
    for (const value of ['', 'x', 'true', 'null', '{', ':', 'EUR', 'abcdefg']) {
      const parsed = ConnectorSettingsInputSchema.safeParse({ secrets: { key: value } });
      expect({ value, success: parsed.success }).toEqual({ value, success: false });
      expect(parsed.error?.issues).toEqual([
        expect.objectContaining({ path: ['secrets', 'key'], code: 'too_small', minimum: 8 }),
      ]);
      expect(parsed.error?.issues[0].message).toMatch(/^at least 8 characters/);
    }
    expect(ConnectorSettingsInputSchema.safeParse({ secrets: { key: 'abcdefgh' } }).success).toBe(true);
    // Deleting a secret stored before the minimum needs no value.
    expect(ConnectorSettingsInputSchema.safeParse({ secrets: { key: null } }).success).toBe(true);
  });

  it('is printable ASCII: a Latin-1 byte echoed by a target that reads it as UTF-8 comes back as another spelling', () => {
    for (const value of ['tok\u00e9n-0123', '\u00ff'.repeat(8), 'caf\u00e9-key', 'tok\u0080-0123']) {
      const parsed = ConnectorSettingsInputSchema.safeParse({ secrets: { key: value } });
      expect({ value, success: parsed.success }).toEqual({ value, success: false });
      expect(parsed.error?.issues).toEqual([
        expect.objectContaining({ path: ['secrets', 'key'], message: expect.stringMatching(/printable ASCII/) }),
      ]);
    }
    expect(ConnectorSettingsInputSchema.safeParse({ secrets: { key: '~!@#$%^&*()_+{}|:"<>?' } }).success).toBe(true);
  });
});
