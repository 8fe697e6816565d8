import type { Logger } from 'pino';

/** Every long-running process stops cleanly on SIGTERM/SIGINT: close in order, then exit 0. */
export function onShutdown(logger: Logger, close: () => Promise<void>, timeoutMs = 25_000): void {
  let closing = false;
  const handler = (signal: string) => {
    if (closing) return;
    closing = true;
    logger.info({ signal }, 'shutting down');
    const force = setTimeout(() => {
      logger.error('shutdown timed out; exiting');
      process.exit(1);
    }, timeoutMs);
    force.unref();
    close().then(
      () => {
        logger.info('stopped');
        process.exit(0);
      },
      (error: unknown) => {
        logger.error({ err: error }, 'error while shutting down');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => handler('SIGTERM'));
  process.on('SIGINT', () => handler('SIGINT'));
}

/**
 * Node still crashes on an uncaught exception or unhandled rejection (a process in an unknown state should not go
 * on), but first the error is logged with its stack through pino, so the cause survives in the app's log.
 */
export function logCrashes(logger: Logger): void {
  process.on('uncaughtExceptionMonitor', (error, origin) => logger.fatal({ err: error, origin }, 'crashing'));
}
