import { TenantSlots } from './tenant-slots';

describe('TenantSlots: one tenant holds at most its share of the delivery slots', () => {
  it.each([
    [1, 1],
    [2, 1],
    [3, 1],
    [4, 2],
    [16, 8],
  ])('of %i slots, one tenant may hold %i', (slots, share) => {
    expect(TenantSlots.shareOf(slots)).toBe(share);
  });

  it('refuses a tenant at its share, saying when its oldest slot must be free; another tenant still takes one', () => {
    const slots = new TenantSlots(2, 11_000);
    expect(slots.take('a', 1_000)).toBeNull();
    expect(slots.take('a', 2_000)).toBeNull();
    expect(slots.take('a', 3_000)).toEqual({ wakeAt: 12_000 });
    expect(slots.take('b', 3_000)).toBeNull();
    expect(slots.held('a')).toEqual({ taken: 2, waiting: 0 });
    slots.release('a');
    // The oldest went first: the next bound is the one taken at 2,000.
    expect(slots.take('a', 4_000)).toBeNull();
    expect(slots.take('a', 5_000)).toEqual({ wakeAt: 13_000 });
  });

  it('wakes one waiting delivery of the same tenant for each slot it frees, skipping wakes that fail', async () => {
    const slots = new TenantSlots(1, 10_000);
    const woken: string[] = [];
    slots.take('a');
    slots.take('b');
    slots.wakeWhenFree('a', 'a1', async () => {
      woken.push('a1 (gone)');
      throw new Error('job not delayed any more');
    });
    slots.wakeWhenFree('a', 'a2', async () => woken.push('a2'));
    slots.wakeWhenFree('a', 'a3', async () => woken.push('a3'));
    slots.wakeWhenFree('b', 'b1', async () => woken.push('b1'));
    slots.release('a');
    await new Promise((resolve) => setImmediate(resolve));
    expect(woken).toEqual(['a1 (gone)', 'a2']);
    expect(slots.held('a')).toEqual({ taken: 0, waiting: 1 });
    expect(slots.held('b')).toEqual({ taken: 1, waiting: 1 });
  });

  it('wakes at once a delivery that asks after its tenant freed a slot (freed while it was being put back)', async () => {
    const slots = new TenantSlots(1, 10_000);
    const woken: string[] = [];
    slots.take('a', 0);
    // Refused: the caller now puts its job back (an await), and only then asks to be woken.
    expect(slots.take('a', 1)).toEqual({ wakeAt: 10_000 });
    // Meanwhile the slot frees: nobody is waiting yet.
    slots.release('a');
    slots.wakeWhenFree('a', 'a1', async () => woken.push('a1'));
    await new Promise((resolve) => setImmediate(resolve));
    // Not left to wait for wakeAt (up to WEBHOOK_TIMEOUT_MS) with the slot free.
    expect(woken).toEqual(['a1']);
    expect(slots.held('a')).toEqual({ taken: 0, waiting: 0 });
  });

  it('keeps one wake per delivery: one put back again while its earlier wake is on file keeps its place, not two', async () => {
    // A delivery that waited until its wakeAt comes back, finds its tenant at its share again, and is put back again,
    // each round of the tenant's slow receiver: kept once each time, its waits grew the list without end (the
    // reconciler's memory), its wakes outnumbering the slots that free.
    const slots = new TenantSlots(1, 10_000);
    const woken: string[] = [];
    slots.take('a', 0);
    for (let round = 1; round <= 3; round += 1) {
      slots.wakeWhenFree('a', 'first', async () => woken.push(`first (put back ${round})`));
      slots.wakeWhenFree('a', 'second', async () => woken.push(`second (put back ${round})`));
    }
    expect(slots.held('a')).toEqual({ taken: 1, waiting: 2 });
    // Woken in the order they first asked, by their latest wake.
    slots.release('a');
    await new Promise((resolve) => setImmediate(resolve));
    expect(woken).toEqual(['first (put back 3)']);
    expect(slots.held('a')).toEqual({ taken: 0, waiting: 1 });
  });

  it('forgets a tenant that holds nothing, and a release of nothing held changes nothing', () => {
    const slots = new TenantSlots(1, 10_000);
    slots.release('nobody');
    expect(slots.held('nobody')).toEqual({ taken: 0, waiting: 0 });
    expect(slots.take('a', 0)).toBeNull();
    slots.release('a');
    expect(slots.take('a', 5)).toBeNull();
  });
});
