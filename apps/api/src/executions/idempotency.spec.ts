import { requestHash, sentBodyHash } from './idempotency';

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

  const op = (extra: Record<string, unknown> = {}) => ({
    key: 'a',
    connector: 'c',
    action: 'x',
    params: { n: 1 },
    ...extra,
  });
  const body = (opExtra: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) => ({
    agent_id: 'g',
    intent: 'i',
    operations: [op(opExtra)],
    ...extra,
  });

  it('is the same whether a member that means its absence is spelled out or left out, either way round', () => {
    const bare = requestHash(body());
    const spelled = [
      body({ depends_on: [] }),
      body({ requires_approval: false }),
      body({ expected_state: null }),
      body({}, { criteria: [] }),
      body({ depends_on: [], requires_approval: false, expected_state: null }, { criteria: [] }),
    ];
    for (const b of spelled) expect(requestHash(b)).toBe(bare);
    // As sent (what an earlier version recorded), they differ; without a spelled default the two hashes agree.
    expect(sentBodyHash(body({ depends_on: [] }))).not.toBe(bare);
    expect(sentBodyHash(body())).toBe(bare);
  });

  it('differs for a member whose absence means something else, or whose value says more', () => {
    const bare = requestHash(body());
    for (const b of [
      body({ requires_approval: true }),
      body({ depends_on: ['b'] }),
      body({ expected_state: {} }),
      body({ irreversible: false }),
      body({ irreversible: true }),
      body({ verification_method: '' }),
      body({ verification_method: 'read_after_write' }),
      body({}, { deadline_seconds: 600 }),
      body({}, { criteria: [{ key: 'k', operation: 'a', expect_status: 'VERIFIED' }] }),
      // Only in its place: the same name inside params (the connector's) or at the wrong level is kept.
      body({ params: { n: 1, depends_on: [] } }),
      body({}, { depends_on: [] }),
      body({ criteria: [] }),
    ]) {
      expect(requestHash(b)).not.toBe(bare);
    }
  });
});
