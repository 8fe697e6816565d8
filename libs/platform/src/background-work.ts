/**
 * The work a process starts on its own timer (a fallback sweep, an outbox pass, a schedule check), so that its
 * shutdown waits for the pass under way instead of closing Postgres and Redis under it. Nest closes the DataSource and
 * the Redis clients in its last shutdown hook; a pass still running then fails half-way (or, worse, writes half of
 * what it meant to). Stopping refuses new passes and resolves when the running ones have settled. It adds no bound of
 * its own: each statement has the query timeout and the whole shutdown has the process's forced exit.
 */
export class BackgroundWork {
  private readonly running = new Set<Promise<unknown>>();
  private stopped = false;

  /** Whether the process is stopping: a loop checks it between its steps. */
  get stopping(): boolean {
    return this.stopped;
  }

  /** Whether a pass is running now. */
  get busy(): boolean {
    return this.running.size > 0;
  }

  /** Runs `work` and keeps it until it settles; null (and nothing run) once stopping. */
  run<T>(work: () => Promise<T>): Promise<T> | null {
    if (this.stopped) return null;
    const pass = work();
    this.running.add(pass);
    const done = () => void this.running.delete(pass);
    pass.then(done, done);
    return pass;
  }

  /** No new pass from now on; resolves when every pass under way has settled (whether it succeeded or not). */
  async stop(): Promise<void> {
    this.stopped = true;
    while (this.running.size > 0) await Promise.allSettled([...this.running]);
  }
}
