import { MASK, isSecretKey, isSecretParam, maskSecrets, maskString } from './mask';

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

  it("masks a bearer token's own characters (token68), not the amount or recipient written right after it", () => {
    // RFC 6750's b64token (RFC 7235's token68): letters, digits, - . _ ~ + / and trailing '='.
    expect(maskString('Bearer abc$500')).toBe(`Bearer ${MASK}$500`);
    expect(maskString('pay Bearer abc€500 to acct:DE89')).toBe(`pay Bearer ${MASK}€500 to acct:DE89`);
    expect(maskString('Bearer eyJhbGciOi.eyJzdWIi.c2lnbmF0dXJl== then $500')).toBe(`Bearer ${MASK} then $500`);
    expect(maskString('Bearer abc)+1')).toBe(`Bearer ${MASK})+1`);
    // A slash is a token character: `abc/500` may be one token, and is masked whole.
    expect(maskString('Bearer abc/500 USD')).toBe(`Bearer ${MASK} USD`);
  });

  it('masks a query parameter that names a credential, and not one that merely contains its letters', () => {
    expect(
      maskString('https://x.test/t?api_key=1&apiKey=2&auth=3&X-Amz-Signature=4&client_secret=5&session_token=6'),
    ).toBe(
      `https://x.test/t?api_key=${MASK}&apiKey=${MASK}&auth=${MASK}&X-Amz-Signature=${MASK}&client_secret=${MASK}&session_token=${MASK}`,
    );
    expect(maskString('https://x.test/transfer?to=attacker&monkey=ALL_FUNDS&keyword=delete&author=me')).toBe(
      'https://x.test/transfer?to=attacker&monkey=ALL_FUNDS&keyword=delete&author=me',
    );
    for (const name of ['key', 'private-key', 'authKey', 'AUTH']) expect(isSecretParam(name)).toBe(true);
    for (const name of ['monkey', 'keyword', 'author', 'keys_count', 'sig', 'id'])
      expect(isSecretParam(name)).toBe(false);
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
