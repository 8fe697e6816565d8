import { newId } from './ids';

describe('newId', () => {
  it('is the prefix, 10 characters of time and 16 random ones, in the Crockford-like alphabet', () => {
    expect(newId('evt')).toMatch(/^evt_[0-9a-hjkmnp-tv-z]{26}$/);
  });

  it('sorts by creation time (the list cursor relies on it)', async () => {
    const first = newId('exe');
    await new Promise((resolve) => setTimeout(resolve, 5));
    const second = newId('exe');
    expect(first.slice(4, 14) < second.slice(4, 14)).toBe(true);
  });

  it('never repeats, across many refills of its random pool (256 ids each)', () => {
    const ids = Array.from({ length: 20_000 }, () => newId('op'));
    expect(new Set(ids).size).toBe(ids.length);
    // No two consecutive ids share their random tail (each takes fresh bytes of the pool).
    const tails = new Set(ids.map((id) => id.slice(-16)));
    expect(tails.size).toBe(ids.length);
  });
});
