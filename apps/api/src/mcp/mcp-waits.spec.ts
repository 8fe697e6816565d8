import { STOP_CLOSE_MS, StopDeadline } from '@verity/platform';
import type { VerityMcp } from '@verity/sdk/mcp';
import { McpWaits } from './mcp-waits';

/** A server whose waits never answer (their read of the state stalled, as on a Postgres that does not answer). */
function stalled(): VerityMcp & { stopped: boolean } {
  const server = {
    stopped: false,
    stopWaits: () => {
      server.stopped = true;
      return new Promise<void>(() => undefined);
    },
  };
  return server as unknown as VerityMcp & { stopped: boolean };
}

describe('McpWaits.stopAll', () => {
  it('resolves once the waits have answered', async () => {
    const waits = new McpWaits();
    let answered = false;
    waits.serve({
      stopWaits: async () => {
        answered = true;
      },
    } as unknown as VerityMcp);
    await waits.stopAll(new StopDeadline());
    expect(answered).toBe(true);
    expect(waits.isStopping).toBe(true);
  });

  it('gives up on waits still unanswered at the stop deadline, so the close that follows keeps its time', async () => {
    // The clock is the test's: the stop resolves when the deadline's time has passed, not before, with the wait never
    // answering (a stalled read would otherwise hold the stop for its own bound, 8 s).
    jest.useFakeTimers();
    try {
      const waits = new McpWaits();
      const server = stalled();
      waits.serve(server);
      const deadline = new StopDeadline();
      // 150 ms left for database work.
      deadline.begin(STOP_CLOSE_MS + 150);
      let resolved = false;
      const stopping = waits.stopAll(deadline).then(() => (resolved = true));
      await jest.advanceTimersByTimeAsync(149);
      expect({ stopped: server.stopped, resolved }).toEqual({ stopped: true, resolved: false });
      await jest.advanceTimersByTimeAsync(1);
      expect(resolved).toBe(true);
      await stopping;
    } finally {
      jest.useRealTimers();
    }
  });

  it('a server served while stopping is stopped at once', () => {
    const waits = new McpWaits();
    void waits.stopAll(new StopDeadline());
    const server = stalled();
    waits.serve(server);
    expect(server.stopped).toBe(true);
  });
});
