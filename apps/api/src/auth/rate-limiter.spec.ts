import { RateLimiter } from './rate-limiter';

describe('RateLimiter', () => {
  it('allows a burst of the per-minute budget, then answers with the seconds to wait', () => {
    const limiter = new RateLimiter(3);
    const now = 1_000_000;
    expect([limiter.take('k', now), limiter.take('k', now), limiter.take('k', now)]).toEqual([0, 0, 0]);
    expect(limiter.take('k', now)).toBe(20);
  });

  it('refills over time and keeps keys apart', () => {
    const limiter = new RateLimiter(60);
    const now = 5_000_000;
    for (let i = 0; i < 60; i += 1) expect(limiter.take('a', now)).toBe(0);
    expect(limiter.take('a', now)).toBe(1);
    expect(limiter.take('b', now)).toBe(0);
    expect(limiter.take('a', now + 1_000)).toBe(0);
  });
});
