import { Inject, Injectable } from '@nestjs/common';
import { VERITY_CONFIG, VerityConfig } from '@verity/platform';

/**
 * The MCP requests each key has in flight in this process, at most MAX_MCP_REQUESTS_PER_KEY. Each holds a server, its
 * API calls and, for a wait, a stream or a poll for up to 50 s: without a bound one key's POSTs (100 waits a batch)
 * ran the process out of memory, and every tenant lost the API. Counted in this process, whose memory it guards.
 */
@Injectable()
export class McpInFlight {
  private readonly held = new Map<string, number>();

  constructor(@Inject(VERITY_CONFIG) private readonly config: VerityConfig) {}

  get limit(): number {
    return this.config.MAX_MCP_REQUESTS_PER_KEY;
  }

  /** Takes `count` places for the key, all or none: what gives them back (once), or null past the limit. */
  take(keyId: string, count: number): (() => void) | null {
    const now = this.held.get(keyId) ?? 0;
    if (count > 0 && now + count > this.limit) return null;
    this.held.set(keyId, now + count);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.held.get(keyId) ?? count) - count;
      if (left > 0) this.held.set(keyId, left);
      else this.held.delete(keyId);
    };
  }
}
