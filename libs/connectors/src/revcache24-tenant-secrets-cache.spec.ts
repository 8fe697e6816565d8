import { roundTrips } from '../../../test/support/round-trips';
import { seededRandom } from '../../../test/support/seeded-random';
import { MAX_KEPT_MS, type SecretsMoment, TenantSecretsCache } from './tenant-secrets-cache';

/**
 * Hostile interleavings of TenantSecretsCache, against a model of what Postgres guarantees and nothing more:
 * - a tenant's secrets are at a version, moved by each committed change; a change is answered once committed;
 * - a read's snapshot is taken when its statement is sent (after `reading()`), and it ends whenever it ends;
 * - each change's NOTIFY reaches the connection listening when it committed, in commit order, at any moment after the
 *   commit — and, at the latest, before the answer of a round trip (`heard`) sent after it committed. A connection
 *   lost loses what it had not delivered; none listens while it is down;
 * - a round trip may fail, and one sent on a connection since replaced may still be answered (late).
 * The property: an answer to a request holds every change committed before the request arrived (a client that sent it
 * after a change was answered sees it), and a page of a stream whose answer began after a change's NOTIFY was handled
 * holds that change.
 */

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

interface Connection {
  live: boolean;
  /** Changes committed while it listened, not yet handed to `changed`, oldest first. */
  undelivered: number[];
  /** Round trips under way, in the order sent: each answered after the changes committed before it was sent. */
  trips: { committedBefore: number; answer: () => void; fail: () => void }[];
}

interface Answer {
  seed: number;
  kind: 'request' | 'page';
  needed: number;
  got: number;
}

/** One interleaving of `steps` random steps; the answers that missed a change they had to hold. */
async function interleave(seed: number, steps: number, lateSnapshots = false): Promise<Answer[]> {
  const rnd = seededRandom(seed);
  const pick = <T>(items: T[]): T => items[Math.floor(rnd() * items.length)];
  const cache = new TenantSecretsCache<number>();
  let version = 0;
  /** The latest change whose NOTIFY this process handled on the connection listening now (or any before). */
  let handled = 0;
  let connection: Connection | undefined;
  const lostConnections: Connection[] = [];
  const reads: { finish: () => void }[] = [];
  const statements: { finish: () => void }[] = [];
  /** With lateSnapshots: reads and statements begun, whose snapshot is not taken yet (their statement not yet sent). */
  const unsent: (() => void)[] = [];
  const starts: (() => void)[] = [];
  const answering: Promise<void>[] = [];
  const missed: Answer[] = [];
  const streams: SecretsMoment[] = [];

  const deliver = (conn: Connection, upTo: number) => {
    while (conn.undelivered.length > 0 && conn.undelivered[0] <= upTo) {
      const change = conn.undelivered.shift()!;
      if (conn === connection) {
        cache.changed('acme');
        handled = Math.max(handled, change);
      }
    }
  };
  const listen = () => {
    const conn: Connection = { live: true, undelivered: [], trips: [] };
    connection = conn;
    cache.setLive(true, () => {
      if (!conn.live && rnd() < 0.5) return Promise.reject(new Error('Connection terminated'));
      const committedBefore = version;
      return new Promise<void>((resolve, reject) => {
        conn.trips.push({
          committedBefore,
          answer: () => {
            deliver(conn, committedBefore);
            resolve();
          },
          fail: () => reject(new Error('Connection terminated unexpectedly')),
        });
      });
    });
  };
  /** A read of the secrets: its snapshot taken when it is sent, its answer given when the interleaving says. */
  const read = () => {
    let snapshot = version;
    return new Promise<{ value: number; size: number }>((resolve) => {
      const queued = () => reads.push({ finish: () => resolve({ value: snapshot, size: 1 }) });
      if (!lateSnapshots) return queued();
      unsent.push(() => {
        snapshot = version;
        queued();
      });
    });
  };
  const check = (kind: Answer['kind'], needed: number, answer: Promise<number>) => {
    answering.push(
      answer.then(
        (got) => {
          if (got < needed) missed.push({ seed, kind, needed, got });
        },
        () => undefined,
      ),
    );
  };

  listen();
  for (let step = 0; step < steps; step += 1) {
    const r = rnd();
    if (r < 0.1) {
      // A change commits (and is answered): the connection listening then will deliver its NOTIFY.
      version += 1;
      if (connection?.live) connection.undelivered.push(version);
    } else if (r < 0.2) {
      // A NOTIFY arrives on its own.
      if (connection?.live && connection.undelivered.length > 0) deliver(connection, connection.undelivered[0]);
    } else if (r < 0.3) {
      // The oldest round trip under way is answered (on a connection still listening, or one lost: late).
      const conn = pick([connection, ...lostConnections].filter((c): c is Connection => !!c && c.trips.length > 0));
      if (conn) conn.trips.shift()!.answer();
    } else if (r < 0.33) {
      const conn = connection;
      if (conn && conn.trips.length > 0) conn.trips.shift()!.fail();
    } else if (r < 0.36) {
      // The LISTEN connection is lost (and seen lost): what it had not delivered is lost with it.
      if (connection?.live) {
        connection.live = false;
        connection.undelivered = [];
        lostConnections.push(connection);
        cache.setLive(false);
        connection = undefined;
      }
    } else if (r < 0.4) {
      if (!connection) listen();
    } else if (r < 0.55) {
      // A request arrives; its answer is asked for now or later (its handler runs meanwhile).
      const since = cache.now();
      const needed = version;
      starts.push(() => check('request', needed, cache.get('acme', read, since)));
    } else if (r < 0.6) {
      if (starts.length > 0) starts.splice(Math.floor(rnd() * starts.length), 1)[0]();
    } else if (r < 0.63) {
      // A stream is asked for (the request) — its first answer confirms, its pages follow.
      const since = cache.now();
      const needed = version;
      streams.push(since);
      check('request', needed, cache.get('acme', read, since));
    } else if (r < 0.7) {
      // A page of a stream: it holds every change whose NOTIFY was handled before it began.
      if (streams.length > 0) check('page', handled, cache.get('acme', read, pick(streams)));
    } else if (r < 0.75) {
      // An intake's statement tells what the tenant holds, on a snapshot taken after it began (noSecretsFound).
      const began = cache.reading();
      let snapshot = version;
      const queued = () => statements.push({ finish: () => cache.found('acme', began, snapshot, 1) });
      if (!lateSnapshots) queued();
      else {
        unsent.push(() => {
          snapshot = version;
          queued();
        });
      }
    } else if (r < 0.8) {
      // (With lateSnapshots, one in two of these steps sends a statement begun earlier: its snapshot is taken now.)
      if (lateSnapshots && unsent.length > 0 && rnd() < 0.5) unsent.splice(Math.floor(rnd() * unsent.length), 1)[0]();
      else if (statements.length > 0) statements.splice(Math.floor(rnd() * statements.length), 1)[0].finish();
    } else {
      if (reads.length > 0) reads.splice(Math.floor(rnd() * reads.length), 1)[0].finish();
    }
    await flush();
  }
  // Everything left ends: reads, statements, round trips (answered), answers asked for.
  for (let rounds = 0; rounds < 1000; rounds += 1) {
    const trips = [connection, ...lostConnections].filter((c): c is Connection => !!c && c.trips.length > 0);
    if (starts.length > 0) starts.shift()!();
    else if (unsent.length > 0) unsent.shift()!();
    else if (statements.length > 0) statements.shift()!.finish();
    else if (reads.length > 0) reads.shift()!.finish();
    else if (trips.length > 0) trips[0].trips.shift()!.answer();
    else break;
    await flush();
  }
  await Promise.all(answering);
  return missed;
}

describe('TenantSecretsCache under hostile interleavings (revcache24)', () => {
  it('no answer misses a change committed before its request arrived; no page one whose NOTIFY was handled before it: 400 interleavings', async () => {
    const missed: Answer[] = [];
    for (let seed = 1; seed <= 400; seed += 1) missed.push(...(await interleave(seed, 150)));
    expect(missed).toEqual([]);
  }, 60_000);

  it("the same when a read's snapshot is taken any time after it began (its statement sent later), reads ending in any order: 400 interleavings", async () => {
    const missed: Answer[] = [];
    for (let seed = 1; seed <= 400; seed += 1) missed.push(...(await interleave(seed, 150, true)));
    expect(missed).toEqual([]);
  }, 60_000);

  it('many answers waiting on one round trip that fails all read the values again (none answers from what was kept), and wait on two round trips at most', async () => {
    const cache = new TenantSecretsCache<string>();
    const trips = roundTrips();
    cache.setLive(true, trips.heard);
    await cache.get('acme', async () => ({ value: 'kept', size: 4 }));
    // One round trip under way (sent before the others arrived)…
    const first = cache.get('acme', async () => ({ value: 'read', size: 4 }));
    // …and 1,000 requests arriving meanwhile: all share the one sent after it.
    let reads = 0;
    const waiting = Array.from({ length: 1000 }, () =>
      cache.get('acme', async () => {
        reads += 1;
        return { value: 'read', size: 4 };
      }),
    );
    expect(trips.sent).toBe(1);
    await trips.answer();
    expect(await first).toBe('kept');
    expect(trips.sent).toBe(2);
    expect(trips.underWay).toBe(1);
    // The LISTEN connection dies under it: every one of them reads anew.
    await trips.fail();
    expect(new Set(await Promise.all(waiting))).toEqual(new Set(['read']));
    expect(reads).toBe(1000);
    expect(trips.sent).toBe(2);
  });

  it('a round trip answered after its connection was replaced confirms no request, even one that arrived before it was sent', async () => {
    const cache = new TenantSecretsCache<string>();
    const old = roundTrips();
    cache.setLive(true, old.heard);
    await cache.get('acme', async () => ({ value: 'before', size: 6 }));
    const since = cache.now();
    const asked = cache.get('acme', async () => ({ value: 'after', size: 5 }), since);
    expect(old.sent).toBe(1);
    // Replaced (a reconnect) between the request's arrival and the round trip's answer; a change committed while no
    // connection listened is never announced. The old connection's round trip is then answered.
    const fresh = roundTrips();
    cache.setLive(false);
    cache.setLive(true, fresh.heard);
    await old.answer();
    expect(await asked).toBe('after');
    // Its next answer (a stream's page) uses what it read after it arrived, with no round trip.
    expect(await cache.get('acme', async () => ({ value: 'not read', size: 8 }), since)).toBe('after');
    expect(fresh.sent).toBe(0);
  });

  it('a value read before the request arrived, and kept after a change was announced while it ran, is not kept: the next answer reads', async () => {
    const cache = new TenantSecretsCache<string>();
    const trips = roundTrips();
    cache.setLive(true, trips.heard);
    let finish: (() => void) | undefined;
    // A read begins (for an earlier request), on a snapshot from before the change.
    const early = cache.get('acme', () => new Promise((resolve) => (finish = () => resolve({ value: 'v1', size: 2 }))));
    // The change commits and is announced; then a request arrives; then the read ends.
    cache.changed('acme');
    const since = cache.now();
    finish!();
    expect(await early).toBe('v1');
    const next = cache.get('acme', async () => ({ value: 'v2', size: 2 }), since);
    await flush();
    // Were 'v1' kept, its moment (before the request) would ask a round trip: answered, so the answer is not held up.
    if (trips.underWay > 0) await trips.answer();
    expect(await next).toBe('v2');
    expect(trips.sent).toBe(0);
  });

  it('keeps what it read MAX_KEPT_MS of a monotonic clock: a wall clock set back an hour does not keep it longer', async () => {
    jest.useFakeTimers({ now: new Date('2026-12-07T10:00:00Z') });
    try {
      const cache = new TenantSecretsCache<string>();
      cache.setLive(true);
      let reads = 0;
      const read = async () => {
        reads += 1;
        return { value: `v${reads}`, size: 2 };
      };
      expect(await cache.get('acme', read)).toBe('v1');
      // NTP steps the wall clock back an hour; MAX_KEPT_MS then passes.
      jest.setSystemTime(Date.now() - 3_600_000);
      jest.advanceTimersByTime(MAX_KEPT_MS);
      expect(await cache.get('acme', read)).toBe('v2');
      // Set forward an hour: what was just read is still kept (not read at every answer).
      jest.setSystemTime(Date.now() + 2 * 3_600_000);
      expect(await cache.get('acme', read)).toBe('v2');
      expect(reads).toBe(2);
    } finally {
      jest.useRealTimers();
    }
  });
});
