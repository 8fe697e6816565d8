/**
 * Places held per owner (a key, a tenant) in one API process, for the in-process bounds on /v1 and MCP requests in
 * flight and on open streams: adds `by` (negative to give places back) and forgets an owner left with none, so the map holds only owners
 * that hold something.
 */
export function adjustHeld(counts: Map<string, number>, owner: string, by: number): void {
  const left = (counts.get(owner) ?? 0) + by;
  if (left > 0) counts.set(owner, left);
  else counts.delete(owner);
}

/** `release` that runs once, however often it is called: places given back twice would be room never held. */
export function releaseOnce(release: () => void): () => void {
  let released = false;
  return () => {
    if (released) return;
    released = true;
    release();
  };
}

/** Which bound of this process a refused take would have passed. */
export type TenantShareBound = 'tenant' | 'process';

export type TenantShareTake =
  | { taken: true; /** Gives the places back (once). */ release: () => void }
  | { taken: false; bound: TenantShareBound; limit: number };

/**
 * A bound on what all tenants together hold in this process (`processLimit`), with one tenant, all its keys together,
 * held to half of it (rounded up, so at least one place): however many keys a tenant holds, it never takes the whole
 * process, and another tenant is still served. Counts /v1 and MCP requests in flight and open streams.
 */
export class TenantShare {
  private readonly byTenant = new Map<string, number>();
  private inProcess = 0;

  constructor(readonly processLimit: number) {}

  get tenantLimit(): number {
    return Math.ceil(this.processLimit / 2);
  }

  /** Takes `count` places for the tenant, all or none; a take of none is never refused. */
  take(tenantId: string, count = 1): TenantShareTake {
    if (count > 0) {
      const held = this.byTenant.get(tenantId) ?? 0;
      if (held + count > this.tenantLimit) return { taken: false, bound: 'tenant', limit: this.tenantLimit };
      if (this.inProcess + count > this.processLimit) {
        return { taken: false, bound: 'process', limit: this.processLimit };
      }
    }
    adjustHeld(this.byTenant, tenantId, count);
    this.inProcess += count;
    return {
      taken: true,
      release: releaseOnce(() => {
        adjustHeld(this.byTenant, tenantId, -count);
        this.inProcess -= count;
      }),
    };
  }
}

/** Which bound of this process a refused take of a key would have passed. */
export type KeyShareBound = 'key' | TenantShareBound;

export type KeyShareTake =
  | { taken: true; /** Gives the places back (once). */ release: () => void }
  | { taken: false; bound: KeyShareBound; limit: number };

/**
 * Requests in flight in this process, bounded three ways: per key (`keyLimit`), and per tenant and in all as a
 * TenantShare of `processLimit`. One owner for the /v1 and the MCP requests a key has in flight (each an instance of
 * its own, with its own bounds).
 */
export class KeyShare {
  private readonly byKey = new Map<string, number>();
  private readonly share: TenantShare;

  constructor(
    readonly keyLimit: number,
    processLimit: number,
  ) {
    this.share = new TenantShare(processLimit);
  }

  get processLimit(): number {
    return this.share.processLimit;
  }

  /** A tenant's share of the process: half, rounded up (so at least one place). */
  get tenantLimit(): number {
    return this.share.tenantLimit;
  }

  /** The places the key holds. */
  heldBy(keyId: string): number {
    return this.byKey.get(keyId) ?? 0;
  }

  /** Whether `count` more places would take the key past its own bound. */
  passesKey(keyId: string, count: number): boolean {
    return count > 0 && this.heldBy(keyId) + count > this.keyLimit;
  }

  /** Takes `count` places for the key and its tenant, all or none; a take of none is never refused. */
  take(owner: { keyId: string; tenantId: string }, count = 1): KeyShareTake {
    if (this.passesKey(owner.keyId, count)) return { taken: false, bound: 'key', limit: this.keyLimit };
    const place = this.share.take(owner.tenantId, count);
    if (!place.taken) return place;
    adjustHeld(this.byKey, owner.keyId, count);
    return {
      taken: true,
      release: releaseOnce(() => {
        adjustHeld(this.byKey, owner.keyId, -count);
        place.release();
      }),
    };
  }
}
