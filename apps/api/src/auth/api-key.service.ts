import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { findActiveKey, hashApiKey, isKeyActive, isPublishedDemoKey } from '@verity/persistence';
import { AuthFailureLimiter, VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { PRODUCER_REDIS } from '@verity/queues';
import type { RedisClient as Redis } from '@verity/platform';
import { DataSource } from 'typeorm';
import { Problem } from '../problem/problem';
import { RequestAdmission } from './admission';
import { addressedLocally } from './local-host';
import type { AnyPrincipal } from './principal';
import type { SharedRateLimiter } from './rate-limiter';

/** How long a found key is trusted without asking Postgres again, while revocations arrive by NOTIFY. */
const POSITIVE_TTL_MS = 10_000;
const NEGATIVE_TTL_MS = 2_000;

/**
 * Looks up API keys by hash. Lookups are cached briefly; a revocation NOTIFYs every API process, which drops its
 * cache at once (EventNotifier), so a revoked key stops working immediately, open streams included. While the
 * LISTEN connection is down no notification can arrive, so found keys are then not cached at all.
 */
@Injectable()
export class ApiKeyService {
  private cache = new Map<string, { principal: AnyPrincipal | null; until: number }>();
  private readonly revokedListeners = new Set<() => void>();
  private revocationsLive = false;
  /** Lookups of keys not known yet, by address and key hash, while they run (authenticateFrom). */
  private readonly lookups = new Map<
    string,
    Promise<{ principal: AnyPrincipal | null } | { blockedFor: number } | { busy: true }>
  >();
  private readonly failures: AuthFailureLimiter;
  private readonly admission: RequestAdmission;
  /** Production: the published demo keys authenticate as nobody, even where an earlier local demo seeded them. */
  private readonly refuseDemoKeys: boolean;

  constructor(
    @InjectDataSource() private readonly db: DataSource,
    @Inject(VERITY_CONFIG) config: VerityConfig,
    @Inject(PRODUCER_REDIS) redis: Redis,
  ) {
    this.failures = new AuthFailureLimiter(redis, config.QUEUE_PREFIX, config.AUTH_FAILURES_PER_MINUTE);
    this.admission = new RequestAdmission(redis, config.QUEUE_PREFIX, this.failures);
    this.refuseDemoKeys = config.NODE_ENV === 'production';
  }

  /**
   * The one way a request's key is checked: an address that keeps presenting unknown keys is refused with 429
   * (whatever key it sends next) before the key is even looked up; an unknown or revoked key is 401.
   */
  async authenticateFrom(address: string, key: string): Promise<AnyPrincipal> {
    const hash = hashApiKey(key);
    const known = this.cached(hash);
    if (known) {
      const wait = await this.failures.blockedFor(address);
      if (wait > 0) throw tooManyFailures(wait);
      return known;
    }
    // A key not known to be valid is looked up under a reservation (AuthFailureLimiter.reserve): of guesses sent all at
    // once, no more than the limit are looked up. The same key from the same address, asked again while its lookup
    // runs, waits for that one: a client's first burst takes one place.
    const flight = `${address}\u0000${hash}`;
    let lookup = this.lookups.get(flight);
    if (!lookup) {
      const started = this.reserveAndLookUp(address, key).finally(() => {
        if (this.lookups.get(flight) === started) this.lookups.delete(flight);
      });
      lookup = started;
      this.lookups.set(flight, lookup);
    }
    const found = await lookup;
    if ('blockedFor' in found) throw tooManyFailures(found.blockedFor);
    if ('busy' in found) throw tooManyLookups();
    if (found.principal) return found.principal;
    throw new Problem(
      401,
      'unauthorized',
      'Unauthorized',
      'the API key is unknown or revoked',
      {},
      { 'www-authenticate': 'Bearer error="invalid_token"' },
    );
  }

  /**
   * DNS rebinding: a page of another site, its host name re-pointed at this API's address, calls the local demo as its
   * own origin (no CORS applies) and may send any key it knows — the published demo keys are in the README. Such a key
   * is refused (403) on a request whose Host names no IP address or loopback name (addressedLocally), before it is looked
   * up; every other key is judged as before. In production a demo key authenticates as nobody anyway.
   */
  refuseDemoKeyByName(key: string, host: string | undefined): void {
    if (this.refuseDemoKeys || addressedLocally(host) || !isPublishedDemoKey(key)) return;
    throw new Problem(
      403,
      'forbidden',
      'Forbidden',
      `the published demo keys work only on a request addressed to localhost or an IP address, not to the host name ` +
        `${JSON.stringify((host ?? '').slice(0, 200))}: a page of another site whose name was re-pointed at this API ` +
        '(DNS rebinding) must not act with keys anyone can read; use a key of your own',
    );
  }

  /** 429 when the address has used its failed authentications (for a credential checked elsewhere: METRICS_TOKEN). */
  async refuseBlocked(address: string): Promise<void> {
    const wait = await this.failures.blockedFor(address);
    if (wait > 0) throw tooManyFailures(wait);
  }

  private async reserveAndLookUp(
    address: string,
    key: string,
  ): Promise<{ principal: AnyPrincipal | null } | { blockedFor: number } | { busy: true }> {
    const reservation = await this.failures.reserve(address);
    if (reservation.kind === 'blocked') return { blockedFor: reservation.seconds };
    if (reservation.kind === 'busy') return { busy: true };
    let principal: AnyPrincipal | null;
    try {
      principal = await this.authenticate(key);
    } catch (error) {
      // Not looked up (the database did not answer): no failure of the key's.
      await this.failures.settle(address, true);
      throw error;
    }
    await this.failures.settle(address, principal !== null);
    return { principal };
  }

  /**
   * `authenticateFrom`, then a token of `rate` for the key (`rateWait`: 0 when taken, else the seconds to wait). For a
   * key this process already knows — every request of a busy agent but the first few — both checks are one Redis
   * round trip; what they decide is the same.
   */
  async admitFrom(
    address: string,
    key: string,
    rate: SharedRateLimiter,
  ): Promise<{ principal: AnyPrincipal; rateWait: number }> {
    const known = this.cached(hashApiKey(key));
    if (known) {
      const { blockedFor, rateWait } = await this.admission.admit(address, known.keyId, rate);
      if (blockedFor > 0) throw tooManyFailures(blockedFor);
      return { principal: known, rateWait };
    }
    const principal = await this.authenticateFrom(address, key);
    return { principal, rateWait: await rate.take(principal.keyId) };
  }

  async authenticate(key: string): Promise<AnyPrincipal | null> {
    const hash = hashApiKey(key);
    const cached = this.cached(hash);
    if (cached !== undefined) return cached;
    // The cache as it was when the read began: a revocation announced meanwhile replaces it (invalidateAll), and what
    // this read found — possibly the key before it was revoked — then goes into the discarded one, not the new one.
    const cache = this.cache;
    const found = this.refuseDemoKeys && isPublishedDemoKey(key) ? null : await findActiveKey(this.db.manager, key);
    const principal = found ? toPrincipal(found.id, found.tenantId, found.role) : null;
    if (cache.size > 10_000) cache.clear();
    cache.set(hash, { principal, until: Date.now() + (principal ? POSITIVE_TTL_MS : NEGATIVE_TTL_MS) });
    return principal;
  }

  /**
   * What the cache says of a key's hash: its principal, null for a key known to be unknown, undefined when it must be
   * asked. A found key is trusted only while revocations can reach this process.
   */
  private cached(hash: string): AnyPrincipal | null | undefined {
    const entry = this.cache.get(hash);
    if (entry && entry.until > Date.now() && (entry.principal === null || this.revocationsLive)) return entry.principal;
    return undefined;
  }

  async isStillValid(principal: { keyId: string }): Promise<boolean> {
    return isKeyActive(this.db.manager, principal.keyId);
  }

  /** Called by the EventNotifier: whether revocation notifications can currently reach this process. */
  setRevocationsLive(live: boolean): void {
    this.revocationsLive = live;
    if (!live) {
      this.cache = new Map();
      this.lookups.clear();
    }
  }

  invalidateAll(): void {
    this.cache = new Map();
    // A request from now on does not join a lookup that began before the revocation: it reads the key again.
    this.lookups.clear();
    for (const listener of this.revokedListeners) listener();
  }

  onRevocation(listener: () => void): () => void {
    this.revokedListeners.add(listener);
    return () => this.revokedListeners.delete(listener);
  }
}

function tooManyFailures(seconds: number): Problem {
  return new Problem(
    429,
    'too-many-failed-authentications',
    'Too many failed authentications',
    `too many unknown or revoked keys from this address; retry in ${seconds} s`,
    {},
    { 'retry-after': `${seconds}` },
  );
}

/**
 * More keys of one address are being looked up at once than its failure limit, and none has failed: the address is
 * not blocked, the request is only early (a client that sends many keys at once, or many clients behind one address).
 */
function tooManyLookups(): Problem {
  return new Problem(
    429,
    'rate-limited',
    'Too many keys checked at once',
    'more keys from this address are being checked at once than it may have checked at one time; retry in 1 s',
    {},
    { 'retry-after': '1' },
  );
}

/** A row that breaks the role/tenant pairing (the database CHECK forbids it) authenticates as nobody. */
function toPrincipal(keyId: string, tenantId: string | null, role: string): AnyPrincipal | null {
  if (role === 'operator') return tenantId === null ? { keyId, tenantId: null, role: 'operator' } : null;
  if (tenantId === null) return null;
  if (role === 'agent' || role === 'reviewer' || role === 'admin') return { keyId, tenantId, role };
  return null;
}
