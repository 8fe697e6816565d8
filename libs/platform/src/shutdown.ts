import type { Logger } from 'pino';
import { logsWritten } from './logger';

/** How long an orderly exit waits for its last log lines to be written (or refused by a reader gone): see logsWritten. */
const EXIT_LOG_WAIT_MS = 1_000;
/** The same for the exit forced past the grace, which is already late. */
const FORCED_EXIT_LOG_WAIT_MS = 250;

/**
 * What a stop keeps for itself after its database work: ending the pool's sessions (at most 1 s each, side by side),
 * closing Redis, the exit. Smaller than SHUTDOWN_MARGIN_MS (what a connector call or a statement under way at the
 * signal must leave of the grace), so that the answer of a call that ends at its limit still has time to be recorded.
 */
export const STOP_CLOSE_MS = 3_000;

/**
 * When a process's orderly stop must have finished its database work: SHUTDOWN_GRACE_MS − STOP_CLOSE_MS after the
 * signal. A statement under way at the signal fits by the start-up check (DATABASE_QUERY_TIMEOUT_MS +
 * SHUTDOWN_MARGIN_MS ≤ SHUTDOWN_GRACE_MS), but a stop can wait for more than one in a row — a reconciler signalled
 * mid-sweep waited for a pass's statement, then for the release of the sweep lock on its own session, each up to the
 * query timeout, and ended in the forced exit 1 with Postgres stalled. The process's main makes one, hands it to its
 * pg clients (libs/persistence: a statement begun during the stop gets at most what is left, and none once nothing is)
 * and to `onShutdown`, which begins it at the signal.
 */
export class StopDeadline {
  /** Epoch ms; null until the stop begins. */
  private at: number | null = null;

  /** The stop has begun with `graceMs` for the whole of it: database work has that less STOP_CLOSE_MS. */
  begin(graceMs: number): void {
    this.at ??= Date.now() + graceMs - STOP_CLOSE_MS;
  }

  /** How long (ms, 0 when none is left) database work may still take; null while the process is not stopping. */
  leftMs(): number | null {
    return this.at === null ? null : Math.max(0, this.at - Date.now());
  }
}

/**
 * Every long-running process stops cleanly on SIGTERM/SIGINT: close in order, then exit 0. Past `timeoutMs` (the
 * configured SHUTDOWN_GRACE_MS) it exits 1. `deadline` (the one the process's pg clients read) begins at the signal.
 */
export function onShutdown(
  logger: Logger,
  close: () => Promise<void>,
  timeoutMs: number,
  deadline?: StopDeadline,
): void {
  let closing = false;
  const handler = (signal: string) => {
    if (closing) return;
    closing = true;
    deadline?.begin(timeoutMs);
    logger.info({ signal }, 'shutting down');
    // Each exit waits (bounded) until the log lines before it are written or refused: see logsWritten.
    const exitAfterLogs = (code: number, boundMs: number) =>
      void logsWritten(logger, boundMs).then(() => process.exit(code));
    const force = setTimeout(() => {
      logger.error('shutdown timed out; exiting');
      exitAfterLogs(1, FORCED_EXIT_LOG_WAIT_MS);
    }, timeoutMs);
    force.unref();
    close().then(
      () => {
        logger.info('stopped');
        exitAfterLogs(0, EXIT_LOG_WAIT_MS);
      },
      (error: unknown) => {
        logger.error({ err: error }, 'error while shutting down');
        exitAfterLogs(1, EXIT_LOG_WAIT_MS);
      },
    );
  };
  process.on('SIGTERM', () => handler('SIGTERM'));
  process.on('SIGINT', () => handler('SIGINT'));
}

/**
 * Until `onShutdown` is installed, SIGTERM/SIGINT stop the process at once with exit 0: what a process does while it
 * starts (waits for the migration lock another replica holds, runs a migration in its transaction, builds its
 * modules) is either committed or rolled back by Postgres when the session goes, and nothing has been served yet.
 * Without it Node's default ended the process by the signal (no exit code, nothing logged). Call the returned
 * function, and install `onShutdown` in the same turn, before the process takes any work (a worker's jobs start inside
 * Nest's creation of its app: its `onShutdown` is installed before that, and waits for the app to be up).
 */
export function stopWhileStarting(logger: Logger): () => void {
  let starting = true;
  const handler = (signal: string) => {
    if (!starting) return;
    logger.info({ signal }, 'stopped while starting');
    process.exit(0);
  };
  // The listeners stay (inert) after the hand-over: Node watches a signal only while it has a listener, and removing
  // them before `onShutdown` added its own closed the watcher, dropping a signal caught but not yet delivered.
  process.on('SIGTERM', () => handler('SIGTERM'));
  process.on('SIGINT', () => handler('SIGINT'));
  return () => {
    starting = false;
  };
}

/**
 * Node still crashes on an uncaught exception or unhandled rejection (a process in an unknown state should not go
 * on), but first the error is logged with its stack through pino, so the cause survives in the app's log.
 */
export function logCrashes(logger: Logger): void {
  process.on('uncaughtExceptionMonitor', (error, origin) => logger.fatal({ err: error, origin }, 'crashing'));
}
