import { requestHash } from './idempotency';

describe('requestHash', () => {
  it('is the same for the same body in another key order', () => {
    expect(requestHash({ a: 1, b: { c: [1, 2], d: 'x' } })).toBe(requestHash({ b: { d: 'x', c: [1, 2] }, a: 1 }));
  });

  it('differs when any value or the array order differs', () => {
    const base = requestHash({ a: 1, b: [1, 2] });
    expect(requestHash({ a: 2, b: [1, 2] })).not.toBe(base);
    expect(requestHash({ a: 1, b: [2, 1] })).not.toBe(base);
    expect(requestHash({ a: 1, b: [1, 2], c: null })).not.toBe(base);
  });
});
