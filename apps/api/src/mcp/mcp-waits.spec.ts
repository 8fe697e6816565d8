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
    const waits = new McpWaits();
    const server = stalled();
    waits.serve(server);
    const deadline = new StopDeadline();
    // 150 ms left for database work: a stalled read would otherwise hold the stop for its own bound (8 s).
    deadline.begin(STOP_CLOSE_MS + 150);
    const began = Date.now();
    await waits.stopAll(deadline);
    expect(server.stopped).toBe(true);
    expect(Date.now() - began).toBeLessThan(2_000);
  }, 4_000);

  it('a server served while stopping is stopped at once', () => {
    const waits = new McpWaits();
    void waits.stopAll(new StopDeadline());
    const server = stalled();
    waits.serve(server);
    expect(server.stopped).toBe(true);
  });
});
