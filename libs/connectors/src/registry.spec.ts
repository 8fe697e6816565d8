import { effectReference, resendReference } from './connector';
import { ConnectorRegistry } from './registry';

describe('approval amount declarations', () => {
  it('come from the connectors that declare where their amount is, through the registry’s wrapping', () => {
    expect(new ConnectorRegistry().approvalAmountDeclarations()).toEqual([
      { connector: 'sandbox.payments', amountField: 'amount' },
    ]);
  });
});

describe('effect references', () => {
  const registry = new ConnectorRegistry();
  const charge = { amount: 100, currency: 'EUR', reference: 'order-7' };

  it('sandbox.payments names its charge by reference (its Idempotency-Key), through the registry’s wrapping', () => {
    const payments = registry.get('sandbox.payments')!;
    expect(effectReference(payments, 'charge', charge)).toEqual({ field: 'reference', value: 'order-7' });
    expect(effectReference(payments, 'refund', charge)).toBeNull();
    expect(effectReference(payments, 'charge', { amount: 1 })).toBeNull();
  });

  it('connectors whose provider does not deduplicate by a params value name none', () => {
    expect(
      effectReference(registry.get('sandbox.sms')!, 'send', { to: '+1555', body: 'x', client_ref: 'r' }),
    ).toBeNull();
    expect(effectReference(registry.get('http')!, 'request', { method: 'GET', url: 'https://x.test/' })).toBeNull();
  });
});

describe('resend references', () => {
  const registry = new ConnectorRegistry();

  it('sandbox.sms names its message by client_ref (its provider does not deduplicate), through the registry’s wrapping', () => {
    const sms = registry.get('sandbox.sms')!;
    expect(resendReference(sms, 'send', { to: '+1555', body: 'x', client_ref: 'r' })).toEqual({
      field: 'client_ref',
      value: 'r',
    });
    expect(resendReference(sms, 'send', { to: '+1555', body: 'x' })).toBeNull();
    expect(resendReference(sms, 'fax', { client_ref: 'r' })).toBeNull();
  });

  it('a connector whose provider deduplicates (or that names no effect) declares none', () => {
    const charge = { amount: 100, currency: 'EUR', reference: 'order-7' };
    expect(resendReference(registry.get('sandbox.payments')!, 'charge', charge)).toBeNull();
    expect(resendReference(registry.get('http')!, 'request', { method: 'GET', url: 'https://x.test/' })).toBeNull();
  });

  it('a declaration that throws names none', () => {
    const sms = registry.get('sandbox.sms')!;
    expect(
      resendReference(
        {
          ...sms,
          resendReference: () => {
            throw new Error('x');
          },
        },
        'send',
        {},
      ),
    ).toBeNull();
  });
});
