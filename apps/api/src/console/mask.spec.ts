import { MASK, isSecretKey, maskSecrets, maskString } from './mask';

describe('console secret masking', () => {
  it('masks values under secret-looking keys at any depth, and leaves the rest', () => {
    const params = {
      amount: 1250,
      reference: 'order-1',
      headers: { Authorization: 'Bearer sk_live_123', 'X-Api-Key': 'k-1', Accept: 'application/json' },
      auth: { password: 'hunter2', user: 'ops' },
      tokens: [{ access_token: 'abc' }],
    };
    expect(maskSecrets(params)).toEqual({
      amount: 1250,
      reference: 'order-1',
      headers: { Authorization: MASK, 'X-Api-Key': MASK, Accept: 'application/json' },
      auth: { password: MASK, user: 'ops' },
      tokens: MASK,
    });
    expect(params.auth.password).toBe('hunter2');
  });

  it('masks secret references, bearer tokens in text and secret query parameters', () => {
    expect(maskString('code {{secret:otp_code}} and {{ secret:other }}')).toBe(
      `code {{secret:${MASK}}} and {{secret:${MASK}}}`,
    );
    expect(maskString('sent with Bearer abc.def-ghi')).toBe(`sent with Bearer ${MASK}`);
    expect(maskString('https://x.test/hook?id=1&access_token=zzz&sig=2')).toBe(
      `https://x.test/hook?id=1&access_token=${MASK}&sig=2`,
    );
    expect(maskString('https://x.test/v1/charges?reference=order-1')).toBe(
      'https://x.test/v1/charges?reference=order-1',
    );
  });

  it('recognises secret key names regardless of case and separators', () => {
    for (const key of ['token', 'API_KEY', 'apiKey', 'client-secret', 'Authorization', 'card_number', 'cvv']) {
      expect(isSecretKey(key)).toBe(true);
    }
    for (const key of ['reference', 'amount', 'client_ref', 'body', 'to', 'idempotency_key']) {
      expect(isSecretKey(key)).toBe(false);
    }
  });
});
