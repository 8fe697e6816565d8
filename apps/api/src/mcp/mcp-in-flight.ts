import { Inject, Injectable } from '@nestjs/common';
import { VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { adjustHeld } from '../held-counts';

/** Whose requests in flight a refused POST would have put past its bound. */
export type McpInFlightBound = 'key' | 'tenant' | 'process';

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
 */
@Injectable()
export class McpInFlight {
  private readonly held = new Map<string, number>();
  private readonly heldByTenant = new Map<string, number>();
  private heldInProcess = 0;

  constructor(@Inject(VERITY_CONFIG) private readonly config: VerityConfig) {}

  get keyLimit(): number {
    return this.config.MAX_MCP_REQUESTS_PER_KEY;
  }

  get processLimit(): number {
    return this.config.MAX_MCP_REQUESTS_PER_PROCESS;
  }

  /** A tenant's share of the process: half, rounded up (so at least one request). */
  get tenantLimit(): number {
    return Math.ceil(this.processLimit / 2);
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

  /** Takes `count` places for the key and its tenant, all or none. */
  take(owner: { keyId: string; tenantId: string }, count: number): McpInFlightTake {
    const byKey = this.held.get(owner.keyId) ?? 0;
    const byTenant = this.heldByTenant.get(owner.tenantId) ?? 0;
    if (count > 0) {
      if (byKey + count > this.keyLimit) return { taken: false, bound: 'key', limit: this.keyLimit };
      if (byTenant + count > this.tenantLimit) return { taken: false, bound: 'tenant', limit: this.tenantLimit };
      if (this.heldInProcess + count > this.processLimit) {
        return { taken: false, bound: 'process', limit: this.processLimit };
      }
    }
    adjustHeld(this.held, owner.keyId, count);
    adjustHeld(this.heldByTenant, owner.tenantId, count);
    this.heldInProcess += count;
    let released = false;
    return {
      taken: true,
      release: () => {
        if (released) return;
        released = true;
        adjustHeld(this.held, owner.keyId, -count);
        adjustHeld(this.heldByTenant, owner.tenantId, -count);
        this.heldInProcess -= count;
      },
    };
  }
}
