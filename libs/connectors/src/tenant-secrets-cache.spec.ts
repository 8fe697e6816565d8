import { roundTrips } from '../../../test/support/round-trips';
import { MAX_CACHED_CHARACTERS, MAX_CACHED_TENANTS, MAX_KEPT_MS, TenantSecretsCache } from './tenant-secrets-cache';

/** A read of a tenant's secrets, counted, that ends when the test says so (`finish`) or at once. */
function reader(value: string, size = value.length) {
  let reads = 0;
  let finish: (() => void) | undefined;
  return {
    get reads() {
      return reads;
    },
    /** Ends the read under way (held: true). */
    finish: () => finish?.(),
    read:
      (held = false) =>
      async () => {
        reads += 1;
        if (held) await new Promise<void>((resolve) => (finish = resolve));
        return { value, size };
      },
  };
}

/**
 * A cache in a process that hears every change (its LISTEN connection up): it keeps what it reads, and confirms it by
 * `heard` (a round trip on that connection) where given.
 */
function liveCache(heard?: () => Promise<void>): TenantSecretsCache<string> {
  const cache = new TenantSecretsCache<string>();
  cache.setLive(true, heard);
  return cache;
}

describe('TenantSecretsCache', () => {
  it('reads every time while changes cannot reach the process (no LISTEN): nothing is kept', async () => {
    const cache = new TenantSecretsCache<string>();
    const acme = reader('v1');
    expect(await cache.get('acme', acme.read())).toBe('v1');
    expect(await cache.get('acme', acme.read())).toBe('v1');
    expect(acme.reads).toBe(2);
    expect(cache.tenants).toBe(0);
  });

  it('keeps what it read while live; a change of the tenant drops it, and the next answer reads again', async () => {
    const cache = liveCache();
    const acme = reader('v1');
    const other = reader('o1');
    await cache.get('acme', acme.read());
    await cache.get('other', other.read());
    expect(await cache.get('acme', acme.read())).toBe('v1');
    expect(acme.reads).toBe(1);
    cache.changed('acme');
    const changed = reader('v2');
    expect(await cache.get('acme', changed.read())).toBe('v2');
    expect(changed.reads).toBe(1);
    // Another tenant's values stay.
    await cache.get('other', other.read());
    expect(other.reads).toBe(1);
  });

  it('the LISTEN connection lost: everything is dropped and nothing is kept until it listens again', async () => {
    const cache = liveCache();
    const acme = reader('v1');
    await cache.get('acme', acme.read());
    cache.setLive(false);
    expect(cache.tenants).toBe(0);
    await cache.get('acme', acme.read());
    await cache.get('acme', acme.read());
    expect(acme.reads).toBe(3);
    // What was read while it was down is not kept when it listens again: a change made meanwhile was not heard.
    cache.setLive(true);
    await cache.get('acme', acme.read());
    await cache.get('acme', acme.read());
    expect(acme.reads).toBe(4);
  });

  it('keeps nothing a read found when a change was announced while it ran (it may hold the values from before)', async () => {
    const cache = liveCache();
    const stale = reader('before');
    const reading = cache.get('acme', stale.read(true));
    cache.changed('acme');
    stale.finish();
    // The read answers what it found (its own answer began before the change), but keeps none of it.
    expect(await reading).toBe('before');
    expect(cache.tenants).toBe(0);
    const fresh = reader('after');
    expect(await cache.get('acme', fresh.read())).toBe('after');
    expect(fresh.reads).toBe(1);
  });

  it('keeps nothing a read found when the connection was lost, or came back, while it ran', async () => {
    const cache = liveCache();
    const stale = reader('before');
    const reading = cache.get('acme', stale.read(true));
    cache.setLive(false);
    cache.setLive(true);
    stale.finish();
    expect(await reading).toBe('before');
    expect(cache.tenants).toBe(0);
  });

  it('reads again what it kept after MAX_KEPT_MS, even while live: a LISTEN connection dead without a word keeps no value for long', async () => {
    // A connection an idle-timeout dropped silently (a NAT, a proxy) is never seen lost: no announcement reaches the
    // process, and what it kept would be used for as long as it lives.
    jest.useFakeTimers({ now: new Date('2026-12-07T10:00:00Z') });
    try {
      const cache = liveCache();
      const acme = reader('v1');
      await cache.get('acme', acme.read());
      jest.advanceTimersByTime(MAX_KEPT_MS - 1);
      await cache.get('acme', acme.read());
      expect(acme.reads).toBe(1);
      jest.advanceTimersByTime(1);
      const changed = reader('v2');
      expect(await cache.get('acme', changed.read())).toBe('v2');
      expect(changed.reads).toBe(1);
      // What was read again is kept for as long again.
      await cache.get('acme', changed.read());
      expect(changed.reads).toBe(1);
    } finally {
      jest.useRealTimers();
    }
  });

  it('with `heard`, uses what it kept only once every change committed before the answer was asked for is heard', async () => {
    const cache = new TenantSecretsCache<string>();
    let hear: (() => void) | undefined;
    cache.setLive(true, () => new Promise<void>((resolve) => (hear = resolve)));
    const acme = reader('v1');
    // Nothing kept: read, no round trip needed.
    expect(await cache.get('acme', acme.read())).toBe('v1');
    expect(hear).toBeUndefined();
    const changed = reader('v2');
    const answering = cache.get('acme', changed.read());
    // The change's announcement arrives during the round trip: what was kept is not used.
    cache.changed('acme');
    hear?.();
    expect(await answering).toBe('v2');
    expect(changed.reads).toBe(1);
    // The round trip failing (the connection lost under it): read.
    cache.setLive(true, () => Promise.reject(new Error('lost')));
    await cache.get('acme', changed.read());
    expect(await cache.get('acme', changed.read())).toBe('v2');
    expect(changed.reads).toBe(3);
  });

  it('confirms once per request: a later answer to the same request uses what is kept, with no other round trip', async () => {
    const trips = roundTrips();
    const cache = liveCache(trips.heard);
    const acme = reader('v1');
    await cache.get('acme', acme.read());
    // A request arrives (a stream): its first answer waits for a round trip sent after it arrived.
    const since = cache.now();
    const first = cache.get('acme', acme.read(), since);
    expect(trips.sent).toBe(1);
    await trips.answer();
    expect(await first).toBe('v1');
    // Its later answers (the stream's pages) need none.
    expect(await cache.get('acme', acme.read(), since)).toBe('v1');
    expect(await cache.get('acme', acme.read(), since)).toBe('v1');
    expect(trips.sent).toBe(1);
    expect(acme.reads).toBe(1);
    // A change announced meanwhile drops what was kept: the next answer to that request reads again, without one.
    cache.changed('acme');
    const changed = reader('v2');
    expect(await cache.get('acme', changed.read(), since)).toBe('v2');
    expect(changed.reads).toBe(1);
    expect(trips.sent).toBe(1);
    // A request arriving after that round trip was answered needs one of its own.
    const later = cache.get('acme', changed.read());
    expect(trips.sent).toBe(2);
    await trips.answer();
    expect(await later).toBe('v2');
  });

  it('what a read begun earlier found does not replace what one begun later found: a request that arrived between them needs no round trip', async () => {
    const cache = new TenantSecretsCache<string>();
    const trips = roundTrips();
    cache.setLive(true, trips.heard);
    // Two statements that tell what the tenant holds (intakes under way at once): one begins, a request arrives, the
    // request's own begins; the request's ends first, the other last.
    const earlier = cache.reading();
    const since = cache.now();
    const own = cache.reading();
    cache.found('acme', own, 'none', 0);
    cache.found('acme', earlier, 'none', 0);
    const acme = reader('v1');
    const answered = cache.get('acme', acme.read(), since);
    const sent = trips.sent;
    // (Answered when one was sent, so the read ends either way.)
    if (sent > 0) await trips.answer();
    expect(await answered).toBe('none');
    expect(sent).toBe(0);
    expect(acme.reads).toBe(0);
    // A change announced after both still drops it: the next answer reads.
    cache.changed('acme');
    expect(await cache.get('acme', acme.read(), since)).toBe('v1');
    expect(acme.reads).toBe(1);
  });

  it('a round trip sent before a request arrived does not confirm it: the next one does, shared by all who ask meanwhile', async () => {
    const trips = roundTrips();
    const cache = liveCache(trips.heard);
    const acme = reader('v1');
    await cache.get('acme', acme.read());
    const early = cache.get('acme', acme.read());
    expect(trips.sent).toBe(1);
    // Two requests arrive while it is under way: it was sent before they were, so it cannot have heard a change
    // committed just before them. Neither is answered by it; both share the one sent after it.
    const answers: string[] = [];
    const late = [cache.get('acme', acme.read()), cache.get('acme', acme.read())].map((p) =>
      p.then((value) => answers.push(value)),
    );
    // Announced before the second round trip is answered (committed before the late requests were sent).
    await trips.answer();
    expect(await early).toBe('v1');
    expect(answers).toEqual([]);
    expect(trips.sent).toBe(2);
    cache.changed('acme');
    await trips.answer();
    await Promise.all(late);
    expect(trips.sent).toBe(2);
    // What was kept was dropped by the announcement: the late requests read again.
    expect(acme.reads).toBeGreaterThan(1);
  });

  it('uses without a round trip what was read after the request arrived; a value read before needs one', async () => {
    const trips = roundTrips();
    const cache = liveCache(trips.heard);
    const acme = reader('v1');
    const since = cache.now();
    // Read for this request's first answer (or by a statement of its own, `found`): its later answers use it as it is.
    await cache.get('acme', acme.read(), since);
    expect(await cache.get('acme', acme.read(), since)).toBe('v1');
    expect(trips.sent).toBe(0);
    // Found by a statement begun after another request arrived: kept, and that request uses it with no round trip.
    const other = cache.now();
    const statement = cache.reading();
    cache.found('other', statement, 'none', 0);
    expect(await cache.get('other', reader('not read').read(), other)).toBe('none');
    expect(trips.sent).toBe(0);
    // A statement begun before a change was announced finds what may be from before it: not kept.
    const stale = cache.reading();
    cache.changed('other');
    cache.found('other', stale, 'stale', 0);
    expect(cache.tenants).toBe(1);
    // A request that arrives after the read needs a round trip; it failing (the connection lost), the values are read.
    const later = cache.get('acme', acme.read());
    expect(trips.sent).toBe(1);
    await trips.fail();
    expect(await later).toBe('v1');
    expect(acme.reads).toBe(2);
  });

  it('a round trip under way on a connection since replaced serves no request after it', async () => {
    const old = roundTrips();
    const cache = liveCache(old.heard);
    const acme = reader('v1');
    await cache.get('acme', acme.read());
    const asked = cache.get('acme', acme.read());
    expect(old.sent).toBe(1);
    // Replaced while the round trip is under way: what was kept is dropped, and the answer that waited reads.
    const fresh = roundTrips();
    cache.setLive(true, fresh.heard);
    await old.answer();
    expect(await asked).toBe('v1');
    expect(acme.reads).toBe(2);
    // A request arriving now is confirmed on the new connection.
    const next = cache.get('acme', acme.read());
    expect(fresh.sent).toBe(1);
    await fresh.answer();
    expect(await next).toBe('v1');
    expect(acme.reads).toBe(2);
  });

  it('is bounded: by tenants (the least recently used dropped first) and by characters', async () => {
    const cache = liveCache();
    for (let i = 0; i < MAX_CACHED_TENANTS; i += 1) await cache.get(`t${i}`, reader('x').read());
    expect(cache.tenants).toBe(MAX_CACHED_TENANTS);
    // t0 used again: t1 is now the least recently used.
    const first = reader('x');
    await cache.get('t0', first.read());
    expect(first.reads).toBe(0);
    await cache.get('one-more', reader('x').read());
    expect(cache.tenants).toBe(MAX_CACHED_TENANTS);
    const t1 = reader('x');
    await cache.get('t1', t1.read());
    expect(t1.reads).toBe(1);
    await cache.get('t0', first.read());
    expect(first.reads).toBe(0);
    // Values larger than the whole budget are never kept; values that fill it push the others out.
    const huge = reader('huge', MAX_CACHED_CHARACTERS + 1);
    await cache.get('huge', huge.read());
    await cache.get('huge', huge.read());
    expect(huge.reads).toBe(2);
    await cache.get('big', reader('big', MAX_CACHED_CHARACTERS).read());
    expect(cache.tenants).toBe(1);
  });
});
