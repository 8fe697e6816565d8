import type { VerityConfig } from '@verity/platform';
import { McpInFlight } from './mcp-in-flight';

/** Per key 3, per process 7: a tenant's share is 4 (half, rounded up). Streams per key 20 (the default). */
function inFlight(perKey = 3, perProcess = 7, streamsPerKey = 20) {
  return new McpInFlight({
    MAX_MCP_REQUESTS_PER_KEY: perKey,
    MAX_MCP_REQUESTS_PER_PROCESS: perProcess,
    MAX_STREAMS_PER_KEY: streamsPerKey,
  } as VerityConfig);
}

const key = (keyId: string, tenantId: string) => ({ keyId, tenantId });

function released(take: ReturnType<McpInFlight['take']>): () => void {
  if (!take.taken) throw new Error(`refused: ${take.bound}`);
  return take.release;
}

describe('McpInFlight', () => {
  it('refuses a key past its own bound, whatever room the process has', () => {
    const places = inFlight();
    released(places.take(key('a1', 'demo'), 3));
    expect(places.take(key('a1', 'demo'), 1)).toEqual({ taken: false, bound: 'key', limit: 3 });
  });

  it("refuses a tenant's keys together past half the process's bound, and another tenant is still served", () => {
    const places = inFlight();
    // Three keys of one tenant (an agent, a reviewer, an admin), each under its own bound.
    released(places.take(key('agent', 'demo'), 2));
    released(places.take(key('reviewer', 'demo'), 2));
    expect(places.take(key('admin', 'demo'), 1)).toEqual({ taken: false, bound: 'tenant', limit: 4 });
    expect(places.take(key('other', 'demo-other'), 3).taken).toBe(true);
  });

  it('refuses any key past the process bound, all tenants together', () => {
    const places = inFlight();
    released(places.take(key('agent', 'demo'), 3));
    released(places.take(key('reviewer', 'demo'), 1));
    released(places.take(key('other', 'demo-other'), 3));
    expect(places.take(key('other-2', 'demo-other'), 1)).toEqual({ taken: false, bound: 'process', limit: 7 });
    expect(places.take(key('third', 'third'), 1)).toEqual({ taken: false, bound: 'process', limit: 7 });
  });

  it('takes all or none, and what is given back (once) is room again at every level', () => {
    const places = inFlight();
    const agent = released(places.take(key('agent', 'demo'), 3));
    released(places.take(key('other', 'demo-other'), 3));
    // A batch of two would pass the process bound: none of it is taken.
    expect(places.take(key('third', 'third'), 2)).toMatchObject({ taken: false, bound: 'process' });
    released(places.take(key('third', 'third'), 1));
    expect(places.take(key('third', 'third'), 1)).toMatchObject({ taken: false, bound: 'process' });
    agent();
    agent();
    expect(places.take(key('agent', 'demo'), 3).taken).toBe(true);
    expect(places.take(key('admin', 'demo'), 1)).toMatchObject({ taken: false, bound: 'process' });
  });

  it('names the largest POST any moment could take, and the bound that sets it', () => {
    expect(inFlight(3, 7).largestPost).toEqual({ bound: 'key', limit: 3 });
    // A key allowed more than its tenant's share is held to the share.
    expect(inFlight(10, 7).largestPost).toEqual({ bound: 'tenant', limit: 4 });
  });

  // A wait follows the execution's stream: a key holding more waits than it may hold streams (MAX_STREAMS_PER_KEY)
  // polled with the rest, spending the key's request budget.
  it("refuses a key's waits past the streams a key may hold, while its other requests are still taken", () => {
    const places = inFlight(10, 40, 2);
    expect(places.waitLimit).toBe(2);
    const first = released(places.take(key('agent', 'demo'), 1, 1));
    released(places.take(key('agent', 'demo'), 2, 1));
    expect(places.take(key('agent', 'demo'), 1, 1)).toEqual({ taken: false, bound: 'waits', limit: 2 });
    // All or none: a POST of a wait and another call refused for its wait takes no place for the other call either.
    expect(places.take(key('agent', 'demo'), 2, 1)).toEqual({ taken: false, bound: 'waits', limit: 2 });
    expect(places.take(key('agent', 'demo'), 5).taken).toBe(true);
    // Another key's waits are its own; a wait given back (once) is room again.
    expect(places.take(key('other', 'demo'), 1, 1).taken).toBe(true);
    first();
    first();
    released(places.take(key('agent', 'demo'), 1, 1));
    expect(places.take(key('agent', 'demo'), 1, 1)).toMatchObject({ taken: false, bound: 'waits' });
  });

  it('never refuses what carries no request (a cancellation), even when full', () => {
    const places = inFlight(1, 1);
    released(places.take(key('agent', 'demo'), 1));
    expect(places.take(key('agent', 'demo'), 0).taken).toBe(true);
    expect(places.take(key('other', 'demo-other'), 0).taken).toBe(true);
  });
});
