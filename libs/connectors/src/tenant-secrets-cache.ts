import { Injectable } from '@nestjs/common';

/** At most this many tenants' secret values are kept by a process (the least recently used is dropped first). */
export const MAX_CACHED_TENANTS = 1_000;
/** At most this many characters of secret values (names included) are kept by a process, all tenants together. */
export const MAX_CACHED_CHARACTERS = 1_000_000;
/**
 * What was read is kept at most this long, even while the LISTEN connection is up: a connection that died without a
 * word (an idle flow a NAT or a proxy dropped) is never seen lost, and hears nothing. As long as a key is trusted.
 */
export const MAX_KEPT_MS = 10_000;

/**
 * A point in a process' order of events (TenantSecretsCache.now): taken when a request arrives, it says which changes
 * of secrets its answer must honour — every one committed before it.
 */
export type SecretsMoment = number;

/** A read of a tenant's values as it begins (TenantSecretsCache.reading), for `found` to keep what it finds. */
export interface SecretsRead {
  /** Later than every request that arrived before the read began: it sees every change committed before them. */
  moment: SecretsMoment;
  generation: number;
  /**
   * performance.now() then (a monotonic clock: a wall clock set back or forth by NTP or an operator moves it not): what
   * it finds is kept MAX_KEPT_MS from then.
   */
  began: number;
}

interface Entry<T> {
  value: T;
  size: number;
  /** The moment its read began: a request that arrived before it needs no round trip to use it. */
  moment: SecretsMoment;
  /** Used until then (performance.now()), and read again after. */
  until: number;
}

/**
 * Each tenant's secret values as this process last read them (or none), for what its answers are looked through for
 * (TenantConnectors.answerRedactorOf), so an answer does not read them again. Kept only while changes can reach the
 * process (`setLive`): every change of a tenant's secrets is announced, in the statement that makes it, by a NOTIFY
 * that the API's LISTEN connection hands to `changed`; while that connection is down nothing is kept, and nothing kept
 * is used. A process that never listens (a worker) reads the secrets every time.
 *
 * A read that began before a change was announced may end after the announcement was handled, with the values from
 * before it: every announcement and every change of the connection moves `generation`, and what a read found is kept
 * only when the generation did not move while it ran. Values are kept in this process' memory only, as they are
 * opened; bounded by tenants, by characters, and in time (MAX_KEPT_MS: a connection lost unseen hears nothing).
 */
@Injectable()
export class TenantSecretsCache<T = unknown> {
  private readonly entries = new Map<string, Entry<T>>();
  private size = 0;
  private live = false;
  private generation = 0;
  private heard: (() => Promise<void>) | undefined;
  /**
   * Moves when a round trip is sent (`hear`): a round trip of a moment later than a request's (`now` when it arrived)
   * was sent after the request was, so once answered every change committed before the request has been heard.
   */
  private clock: SecretsMoment = 0;
  /** The latest moment whose round trip was answered on the connection listening now (0: none yet). */
  private heardUpTo: SecretsMoment = 0;
  /** The round trip sent on the connection listening now, while it is under way. */
  private underWay: { moment: SecretsMoment; answered: Promise<boolean> } | undefined;
  /** The one to be sent when it is answered, shared by all who ask meanwhile. */
  private next: Promise<boolean> | undefined;
  /** Moves with every setLive: a round trip answered on a connection that is no longer the one listening counts not. */
  private connection = 0;

  /**
   * Whether changes of secrets reach this process now (the LISTEN connection is up, and listens). `heard`: resolves
   * once every change committed before it was called has been announced here (`changed`) — a round trip on the LISTEN
   * connection; what is kept is used for a request only after one sent after the request arrived (or when it was read
   * after that), so a change answered to a client before it asked is never missed. Without it, what is kept is used as
   * it is (a change not yet delivered is not seen).
   */
  setLive(live: boolean, heard?: () => Promise<void>): void {
    this.live = live;
    this.heard = live ? heard : undefined;
    // A round trip on another connection says nothing of what this one hears: none before now counts.
    this.connection += 1;
    this.heardUpTo = 0;
    this.underWay = undefined;
    this.next = undefined;
    this.dropAll();
  }

  /** Now, in the order of round trips: what a request arriving now passes to `get` (an answer honours what came before). */
  now(): SecretsMoment {
    return this.clock;
  }

  /** A change of `tenantId`'s secrets was announced (committed): what was kept of that tenant is dropped. */
  changed(tenantId: string): void {
    this.generation += 1;
    this.drop(tenantId);
  }

  /**
   * What is kept for `tenantId`, or else what `read` gives (secret values, and how many characters they hold): kept when
   * changes reach this process, none was announced while `read` ran, and it fits; for MAX_KEPT_MS at most. `since`:
   * when the request being answered arrived (`now` then; by default now) — every change committed before it is honoured.
   */
  async get(
    tenantId: string,
    read: () => Promise<{ value: T; size: number }>,
    since: SecretsMoment = this.now(),
  ): Promise<T> {
    let kept = this.live ? this.entries.get(tenantId) : undefined;
    // Read after the request arrived (by another answer, or a statement of its own: `found`), and dropped by no change
    // announced since: it holds every change committed before the request, with no round trip.
    if (kept && this.heard && this.heardUpTo <= since && kept.moment <= since) {
      // A change committed (and answered) before this request was sent may not have been delivered yet: heard first —
      // by a round trip sent after the request arrived (one under way since then serves; no other is sent for it).
      kept = (await this.hear(since)) && this.live ? this.entries.get(tenantId) : undefined;
    }
    if (kept && kept.until <= performance.now()) this.drop(tenantId);
    else if (kept) {
      // The most recently used last: the first in the map is the one dropped when the bounds are reached.
      this.entries.delete(tenantId);
      this.entries.set(tenantId, kept);
      return kept.value;
    }
    const reading = this.reading();
    const found = await read();
    this.found(tenantId, reading, found.value, found.size);
    return found.value;
  }

  /** A read of a tenant's values begins now (`get`'s, or a statement that finds them on its way: then `found`). */
  reading(): SecretsRead {
    this.clock += 1;
    return { moment: this.clock, generation: this.generation, began: performance.now() };
  }

  /**
   * What a read begun at `read` found of `tenantId`'s values (and how many characters they hold): kept when changes
   * reach this process, none was announced since it began (it may hold the values from before), and it fits.
   */
  found(tenantId: string, read: SecretsRead, value: T, size: number): void {
    if (!this.live || read.generation !== this.generation || size > MAX_CACHED_CHARACTERS) return;
    // What a read begun later found is kept already (reads run at once, and this one ended last): it stays. It serves
    // every request this one would (those that arrived before this one began) and those that arrived in between, with
    // no round trip; a change this one saw and it did not was committed after it began, and is heard by a request
    // that arrived after that (its round trip) — or, announced, drops it. Replaced, those requests made a round trip.
    const kept = this.entries.get(tenantId);
    if (kept && kept.moment > read.moment) return;
    this.drop(tenantId);
    while (
      this.entries.size > 0 &&
      (this.entries.size >= MAX_CACHED_TENANTS || this.size + size > MAX_CACHED_CHARACTERS)
    ) {
      this.drop(this.entries.keys().next().value as string);
    }
    // Counted from when the read began: what it found is as old as that.
    this.entries.set(tenantId, { value, size, moment: read.moment, until: read.began + MAX_KEPT_MS });
    this.size += size;
  }

  /**
   * Whether a round trip sent after `since` was answered on the connection listening now; false when it failed, or the
   * connection changed meanwhile. One at a time: one sent after `since` and under way is shared; else the next one,
   * shared by all who ask until it is sent (after they asked, so it hears what committed before).
   */
  private hear(since: SecretsMoment): Promise<boolean> {
    if (this.underWay && this.underWay.moment > since) return this.underWay.answered;
    if (this.next) return this.next;
    if (!this.underWay) return this.send();
    const next = this.underWay.answered.then(() => {
      if (this.next === next) this.next = undefined;
      return this.send();
    });
    this.next = next;
    return next;
  }

  /** One round trip, sent now (its moment: later than any request's so far). */
  private send(): Promise<boolean> {
    const heard = this.heard;
    if (!heard) return Promise.resolve(false);
    this.clock += 1;
    const moment = this.clock;
    const connection = this.connection;
    const answered = heard().then(
      () => {
        // Counted only on the connection it was sent on: another one since (setLive) hears what this one did not.
        if (this.connection !== connection) return false;
        this.heardUpTo = Math.max(this.heardUpTo, moment);
        return true;
      },
      () => false,
    );
    const underWay = { moment, answered };
    this.underWay = underWay;
    void answered.then(() => {
      if (this.underWay === underWay) this.underWay = undefined;
    });
    return answered;
  }

  /** How many tenants' values are kept (for tests and diagnostics). */
  get tenants(): number {
    return this.entries.size;
  }

  private drop(tenantId: string): void {
    const entry = this.entries.get(tenantId);
    if (!entry) return;
    this.entries.delete(tenantId);
    this.size -= entry.size;
  }

  private dropAll(): void {
    this.generation += 1;
    this.entries.clear();
    this.size = 0;
  }
}
