import type { Worker } from 'bullmq';
import type { Logger } from 'pino';

/**
 * BullMQ workers have been seen to stop fetching after a Redis reconnect. Every few seconds, a worker that is not
 * running (and not closing) is started again; `error` listeners keep a Redis outage from crashing the process.
 */
export function watchWorker(worker: Worker, logger: Logger, intervalMs = 5000): () => void {
  worker.on('error', (error) => logger.warn({ err: error, queue: worker.name }, 'worker error'));
  const timer = setInterval(() => {
    if (worker.closing || worker.isRunning()) return;
    logger.warn({ queue: worker.name }, 'worker stopped running; restarting it');
    worker.run().catch((error: unknown) => logger.error({ err: error, queue: worker.name }, 'worker restart failed'));
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
