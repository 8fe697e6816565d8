import { Inject, Injectable } from '@nestjs/common';
import { VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { KeyShare, KeyShareBound, adjustHeld, releaseOnce } from '../held-counts';

/** Whose requests in flight a refused POST would have put past its bound (`waits`: the key's wait_for_execution calls). */
export type McpInFlightBound = 'waits' | KeyShareBound;

export type McpInFlightTake =
  | { taken: true; /** Gives the places back (once). */ release: () => void }
  | { taken: false; bound: McpInFlightBound; limit: number };

/**
 * The MCP requests in flight in this process. Each holds a server, its API calls and, for a wait, a stream or a poll
 * for up to 50 s, so they are bounded three ways, all counted in this process, whose memory and event loop they use:
 * - per key, MAX_MCP_REQUESTS_PER_KEY: without it one key's POSTs (100 waits a batch) ran the process out of memory;
 * - per process, MAX_MCP_REQUESTS_PER_PROCESS, all keys together: three keys of 100 waits each held /health/live for
 *   10 s, and every tenant lost the API;
 * - per tenant, half the process's bound (rounded up), all of the tenant's keys together: so that one tenant, however
 *   many keys it holds, never takes the whole process and another tenant's requests are still served.
 * And a key's waits (wait_for_execution) at most MAX_STREAMS_PER_KEY: each follows the execution's stream, and a key
 * holds at most that many streams; past it the waits polled, each once a second, and spent the key's request budget.
 */
@Injectable()
export class McpInFlight {
  private readonly waitsHeld = new Map<string, number>();
  private readonly places: KeyShare;

  constructor(@Inject(VERITY_CONFIG) private readonly config: VerityConfig) {
    this.places = new KeyShare(config.MAX_MCP_REQUESTS_PER_KEY, config.MAX_MCP_REQUESTS_PER_PROCESS);
  }

  get keyLimit(): number {
    return this.places.keyLimit;
  }

  /** The requests the key has in flight in this process. */
  heldBy(keyId: string): number {
    return this.places.heldBy(keyId);
  }

  /** The wait_for_execution calls one key may have in flight in this process: the streams a key may hold. */
  get waitLimit(): number {
    return this.config.MAX_STREAMS_PER_KEY;
  }

  get processLimit(): number {
    return this.places.processLimit;
  }

  /** A tenant's share of the process: half, rounded up (so at least one request). */
  get tenantLimit(): number {
    return this.places.tenantLimit;
  }

  /**
   * The most requests one POST may carry, and the bound that sets it: a batch of more would pass that bound with the
   * process otherwise empty, so no later moment could take it.
   */
  get largestPost(): { bound: McpInFlightBound; limit: number } {
    const bounds: { bound: McpInFlightBound; limit: number }[] = [
      { bound: 'key', limit: this.keyLimit },
      { bound: 'tenant', limit: this.tenantLimit },
      { bound: 'process', limit: this.processLimit },
    ];
    return bounds.reduce((smallest, next) => (next.limit < smallest.limit ? next : smallest));
  }

  /** Takes `count` places for the key and its tenant, `waits` of them waits, all or none. */
  take(owner: { keyId: string; tenantId: string }, count: number, waits = 0): McpInFlightTake {
    // The key's own bound named first, as it is the one a key past both would be told.
    if (this.places.passesKey(owner.keyId, count)) return { taken: false, bound: 'key', limit: this.keyLimit };
    if (waits > 0 && (this.waitsHeld.get(owner.keyId) ?? 0) + waits > this.waitLimit) {
      return { taken: false, bound: 'waits', limit: this.waitLimit };
    }
    const place = this.places.take(owner, count);
    if (!place.taken) return place;
    adjustHeld(this.waitsHeld, owner.keyId, waits);
    return {
      taken: true,
      release: releaseOnce(() => {
        adjustHeld(this.waitsHeld, owner.keyId, -waits);
        place.release();
      }),
    };
  }
}
