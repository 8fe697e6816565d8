import { z } from 'zod';
import { amountFieldErrors, amountFieldProblem, currencyFieldProblem } from './amount-field';
import { Connector } from './connector';
import { ConnectorRegistry } from './registry';

describe('amountFieldProblem: can an operation of this connector carry a number at the field a rule names?', () => {
  const registry = new ConnectorRegistry();
  const connector = (name: string) => registry.require(name);

  /** A connector with only params schemas: what the walk reads. */
  const withParams = (...schemas: z.ZodType<Record<string, unknown>>[]) =>
    ({
      name: 'test.connector',
      actions: Object.fromEntries(schemas.map((params, i) => [`action${i}`, { description: '', params }])),
    }) as unknown as Connector;

  it.each([
    ['sandbox.payments', 'amount', null],
    // The forms a cap's amount_field takes, read as the cap reads them.
    ['sandbox.payments', '$.amount', null],
    ['sandbox.payments', 'amout', /no action of sandbox.payments \(charge\) has a "amout"/],
    ['sandbox.payments', 'currency', /"currency" is not a number in the params of sandbox.payments/],
    ['sandbox.payments', 'amount.value', /no action of sandbox.payments/],
    ['sandbox.sms', 'amount', /no action of sandbox.sms/],
    // The http connector's body is any JSON: only the operation tells.
    ['http', 'body.amount', null],
  ])('%s at %s', (name, path, expected) => {
    const problem = amountFieldProblem(connector(name), path);
    if (expected === null) expect(problem).toBeNull();
    else expect(problem).toMatch(expected);
  });

  // A schema's shape is a plain object: the names it inherits are no member of the params (readField reads own
  // members only), so a rule naming one would never apply (a threshold) or refuse every send (a cap).
  it.each(['constructor', 'toString', '__proto__.x', 'hasOwnProperty', 'payment.valueOf'])(
    'a name every object inherits (%s) is no field of the params',
    (path) => {
      expect(amountFieldProblem(connector('sandbox.payments'), path)).toMatch(/no action of sandbox.payments/);
      expect(currencyFieldProblem(connector('sandbox.payments'), path)).toMatch(/no action of sandbox.payments/);
      const nested = z.strictObject({ payment: z.strictObject({ total: z.number() }) });
      expect(amountFieldProblem(withParams(nested), path)).toMatch(/has a/);
    },
  );

  // Where the params are open (the http connector's body), a member named __proto__, constructor or prototype is still
  // never there: the API refuses those names as keys of every request body. A threshold on one was accepted and never
  // applied (the amount is "missing" on every operation), a cap on one refused every send as unreadable.
  it.each(['body.__proto__', 'body.constructor', 'body.prototype', 'body.order.constructor', '$.body.__proto__'])(
    'a name the API refuses as a key (%s) is no field of open params either',
    (path) => {
      expect(amountFieldProblem(connector('http'), path)).toMatch(/no action of http \(request\) has a/);
      expect(currencyFieldProblem(connector('http'), path)).toMatch(/no action of http \(request\) has a/);
    },
  );

  // A record is open in its keys, not in its values: the http connector's headers take any name, and only strings.
  it.each([
    ['http', 'headers.x-amount', /"headers.x-amount" is not a number in the params of http \(request\)/],
    ['http', 'headers', /"headers" is not a number in the params of http \(request\)/],
    ['http', 'read_back.headers.amount', /not a number in the params of http/],
    ['http', 'headers.x-amount.value', /no action of http \(request\) has a "headers.x-amount.value"/],
  ])('%s at %s: a record of strings holds no number', (name, path, expected) => {
    expect(amountFieldProblem(connector(name), path)).toMatch(expected);
  });

  it('walks into a record by its value type; a name its keys refuse is not there', () => {
    const totals = z.strictObject({ totals: z.record(z.string().regex(/^[a-z]+$/), z.number()) });
    expect(amountFieldProblem(withParams(totals), 'totals.eur')).toBeNull();
    expect(amountFieldProblem(withParams(totals), 'totals.EUR')).toMatch(/no action of test.connector/);
    expect(amountFieldProblem(withParams(totals), 'totals')).toMatch(/not a number/);
    const labels = z.strictObject({ labels: z.record(z.string(), z.string()) });
    expect(amountFieldProblem(withParams(labels), 'labels.a')).toMatch(/not a number/);
    expect(currencyFieldProblem(withParams(labels), 'labels.a')).toBeNull();
  });

  it('walks nested objects and optional members; a loose object or a record is open; one action with it is enough', () => {
    const nested = z.strictObject({ payment: z.strictObject({ total: z.number().optional(), note: z.string() }) });
    expect(amountFieldProblem(withParams(nested), 'payment.total')).toBeNull();
    expect(amountFieldProblem(withParams(nested), 'payment.note')).toMatch(/not a number/);
    expect(amountFieldProblem(withParams(nested), 'payment.totl')).toMatch(/has a "payment.totl"/);
    const lines = z.strictObject({ items: z.array(z.strictObject({ amount: z.number(), sku: z.string() })) });
    expect(amountFieldProblem(withParams(lines), 'items[0].amount')).toBeNull();
    expect(amountFieldProblem(withParams(lines), '$.items[2].amount')).toBeNull();
    expect(amountFieldProblem(withParams(lines), 'items[0].sku')).toMatch(/not a number/);
    expect(amountFieldProblem(withParams(z.object({ a: z.string() })), 'amount')).toMatch(/no action/);
    expect(amountFieldProblem(withParams(z.looseObject({ a: z.string() })), 'amount')).toBeNull();
    expect(amountFieldProblem(withParams(z.record(z.string(), z.unknown())), 'amount')).toBeNull();
    expect(
      amountFieldProblem(withParams(z.object({ a: z.string() }), z.object({ amount: z.number() })), 'amount'),
    ).toBeNull();
  });
});

describe('currencyFieldProblem: can an operation of this connector carry a string at the field a currency is read from?', () => {
  const registry = new ConnectorRegistry();
  const withParams = (params: z.ZodType<Record<string, unknown>>) =>
    ({ name: 'test.connector', actions: { pay: { description: '', params } } }) as unknown as Connector;

  it.each([
    ['sandbox.payments', 'currency', null],
    ['sandbox.payments', '$.currency', null],
    ['sandbox.payments', 'reference', null],
    ['sandbox.payments', 'amount', /"amount" is not a string in the params of sandbox.payments \(charge\)/],
    ['sandbox.payments', 'curency', /no action of sandbox.payments \(charge\) has a "curency"/],
    ['sandbox.sms', 'currency', /no action of sandbox.sms/],
    ['http', 'body.currency', null],
  ])('%s at %s', (name, path, expected) => {
    const problem = currencyFieldProblem(registry.require(name), path);
    if (expected === null) expect(problem).toBeNull();
    else expect(problem).toMatch(expected);
  });

  it('an enum of codes is a string; a nested object is not', () => {
    const params = z.strictObject({
      ccy: z.enum(['EUR', 'USD']),
      money: z.strictObject({ code: z.string().optional() }),
    });
    expect(currencyFieldProblem(withParams(params), 'ccy')).toBeNull();
    expect(currencyFieldProblem(withParams(params), 'money.code')).toBeNull();
    expect(currencyFieldProblem(withParams(params), 'money')).toMatch(/not a string/);
    // The amount check is unchanged: an enum is not a number.
    expect(amountFieldProblem(withParams(params), 'ccy')).toMatch(/not a number/);
  });
});

describe('amountFieldErrors: the amount and currency fields of a rule or cap, as the API reports them', () => {
  const payments = new ConnectorRegistry().require('sandbox.payments');

  it('names each field no action can satisfy under the rule or cap, and only the fields it reads', () => {
    expect(
      amountFieldErrors(payments, 'spending_caps[0]', { amountField: 'amount', currencyField: 'currency' }),
    ).toEqual([]);
    expect(amountFieldErrors(payments, 'spending_caps[1]', { amountField: 'amout', currencyField: 'curency' })).toEqual(
      [
        {
          field: 'spending_caps[1].amount_field',
          rule: 'unknown_amount_field',
          message: amountFieldProblem(payments, 'amout'),
        },
        {
          field: 'spending_caps[1].currency_field',
          rule: 'unknown_currency_field',
          message: currencyFieldProblem(payments, 'curency'),
        },
      ],
    );
    // A cap counting operations only reads no amount; a threshold without a currency reads no currency.
    expect(amountFieldErrors(payments, 'approval_rules[0]', {})).toEqual([]);
    expect(amountFieldErrors(payments, 'approval_rules[0]', { amountField: 'currency' })).toEqual([
      expect.objectContaining({ field: 'approval_rules[0].amount_field', rule: 'unknown_amount_field' }),
    ]);
  });
});
