import { TenantShare } from '../held-counts';

describe('TenantShare (open streams)', () => {
  it('gives one tenant at most half the process (rounded up) and all tenants at most the whole', () => {
    const share = new TenantShare(5);
    expect(share.tenantLimit).toBe(3);
    const held = [share.take('a'), share.take('a'), share.take('a')];
    expect(held.every((t) => t.taken)).toBe(true);
    expect(share.take('a')).toEqual({ taken: false, bound: 'tenant', limit: 3 });
    expect(share.take('b').taken).toBe(true);
    expect(share.take('b').taken).toBe(true);
    expect(share.take('c')).toEqual({ taken: false, bound: 'process', limit: 5 });
  });

  it('takes a place back once, however often it is released', () => {
    const share = new TenantShare(2);
    const first = share.take('a');
    if (!first.taken) throw new Error('refused');
    first.release();
    first.release();
    expect(share.take('a').taken).toBe(true);
    expect(share.take('b').taken).toBe(true);
    expect(share.take('c')).toEqual({ taken: false, bound: 'process', limit: 2 });
  });
});
