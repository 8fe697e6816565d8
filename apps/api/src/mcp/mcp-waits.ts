import { Injectable } from '@nestjs/common';
import type { StopDeadline } from '@verity/platform';
import type { VerityMcp } from '@verity/sdk/mcp';

/**
 * The MCP servers answering requests in this process, so that a stop ends their waits first. A wait_for_execution runs
 * for up to 50 s and changes nothing; at SIGTERM the API ended the stream it followed, the wait tried the API again as
 * it closed, and its answer was "no answer from Verity" (connection refused). Stopped before anything else closes
 * (main.ts), each wait reads the execution's current state while the API still answers, and says the server is
 * stopping: the client has the state, and calls again (another API process serves it).
 */
@Injectable()
export class McpWaits {
  private readonly serving = new Set<VerityMcp>();
  private stopping = false;

  /** The process has begun to stop (stopAll has run): a POST that arrives now is refused, nothing in it carried out. */
  get isStopping(): boolean {
    return this.stopping;
  }

  /** Notes a server; returns what forgets it (when its response has closed). A server made while stopping stops at once. */
  serve(mcp: VerityMcp): () => void {
    this.serving.add(mcp);
    if (this.stopping) void mcp.stopWaits();
    return () => {
      this.serving.delete(mcp);
    };
  }

  /**
   * Ends every wait in flight, and any started after; resolves once those in flight have their answers, or once the
   * stop's deadline for database work has passed (`deadline`, begun at the signal). Each answer reads the state, for up
   * to its own bound (8 s): with Postgres stalled, that held the close that follows past SHUTDOWN_GRACE_MS (10 s at
   * least) and the process ended in the forced exit 1. A wait still unanswered then is closed with the rest.
   */
  async stopAll(deadline: StopDeadline): Promise<void> {
    this.stopping = true;
    const answered = Promise.allSettled([...this.serving].map((mcp) => mcp.stopWaits()));
    const leftMs = deadline.leftMs();
    if (leftMs === null) {
      await answered;
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    const passed = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, leftMs);
      timer.unref();
    });
    await Promise.race([answered, passed]);
    clearTimeout(timer);
  }
}
