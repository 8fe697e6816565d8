import type { Worker } from 'bullmq';
import type { Logger } from 'pino';
import { OutageLog, isRedisUnreachable } from '@verity/platform';

/**
 * BullMQ workers have been seen to stop fetching after a Redis reconnect. Every few seconds, a worker that is not
 * running (and not closing) is started again; `error` listeners keep a Redis outage from crashing the process.
 */
export function watchWorker(worker: Worker, logger: Logger, intervalMs = 5000): () => void {
  // Redis away: BullMQ reports every reconnect attempt (several a second); one line for it, then one a minute.
  const outage = new OutageLog();
  worker.on('error', (error) => {
    if (!isRedisUnreachable(error)) {
      logger.warn({ err: error, queue: worker.name }, 'worker error');
      return;
    }
    const note = outage.failed();
    if (note) {
      logger.warn(
        { err: error, queue: worker.name, unlogged: note.unlogged },
        'worker error: Redis unreachable (logged again at most once a minute while it lasts)',
      );
    }
  });
  const timer = setInterval(() => {
    if (worker.closing || worker.isRunning()) return;
    logger.warn({ queue: worker.name }, 'worker stopped running; restarting it');
    worker.run().catch((error: unknown) => logger.error({ err: error, queue: worker.name }, 'worker restart failed'));
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}

/** The jobs a worker is running in this process. */
export interface WorkerJobs {
  /** Whether one is running now. */
  busy(): boolean;
  /** Resolves when none is. */
  idle(): Promise<void>;
}

const NO_JOBS: WorkerJobs = { busy: () => false, idle: () => Promise.resolve() };

/** How long a worker's close may still take once none of its jobs is running here (BullMQ's last writes, QUIT). */
export const CLOSE_GRACE_MS = 2_000;

/**
 * On SIGTERM, before anything else shuts down: stop taking jobs and wait for the active ones to finish. Nest runs
 * every module's shutdown hook in an order of its own, so a worker left to @nestjs/bullmq's hook could keep taking
 * new jobs while the app drains its in-flight sends.
 *
 * `jobs` tells whether any of this worker's jobs is running in this process. With Redis down, BullMQ's close never
 * ends: it waits for its blocking connection's 'end', which ioredis never emits for a client disconnected while it
 * waits to reconnect. Every SIGTERM during a Redis outage then ended in the forced exit 1 after 25 s. So once no job
 * of ours is running and the close has had CLOSE_GRACE_MS more, it is left behind: nothing of this process is lost
 * (what a job did is in Postgres; a job Redis still lists as active is stalled and taken again, as after a crash).
 */
export async function closeWorker(
  worker: Worker,
  logger: Logger,
  jobs: WorkerJobs = NO_JOBS,
  graceMs = CLOSE_GRACE_MS,
): Promise<void> {
  let settled = false;
  let grace: NodeJS.Timeout | undefined;
  let endGrace: (() => void) | undefined;
  const closed = worker
    .close()
    .then(
      () => true,
      (error: unknown) => {
        logger.warn({ err: error, queue: worker.name }, 'worker close failed');
        return true;
      },
    )
    .finally(() => {
      settled = true;
      clearTimeout(grace);
      endGrace?.();
    });
  const abandoned = (async () => {
    // Until no job of ours is running and the close has had its grace since (a job fetched as the close began may
    // still start).
    while (!settled) {
      await jobs.idle();
      await new Promise<void>((resolve) => {
        endGrace = resolve;
        grace = settled ? undefined : setTimeout(resolve, graceMs);
        if (settled) resolve();
      });
      if (!settled && !jobs.busy()) return false;
    }
    return true;
  })();
  if (await Promise.race([closed, abandoned])) {
    logger.info({ queue: worker.name }, 'worker closed: no new jobs, active ones finished');
    return;
  }
  logger.warn(
    { queue: worker.name, graceMs },
    'worker closed without its Redis connection (Redis unreachable?): no new jobs, active ones finished',
  );
}
