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

/**
 * On SIGTERM, before anything else shuts down: stop taking jobs and wait for the active ones to finish. Nest runs
 * every module's shutdown hook in an order of its own, so a worker left to @nestjs/bullmq's hook could keep taking
 * new jobs while the app drains its in-flight sends.
 */
export async function closeWorker(worker: Worker, logger: Logger): Promise<void> {
  await worker.close();
  logger.info({ queue: worker.name }, 'worker closed: no new jobs, active ones finished');
}
