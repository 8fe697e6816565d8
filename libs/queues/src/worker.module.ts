import { VerityConfig } from '@verity/platform';
import type { WorkerOptions } from 'bullmq';
import { QueueName } from './names';

// The workers are QueueWorker providers (queue-worker.ts), built at bootstrap from the injected config; the queues a
// worker app reads besides its own come from the producer (JobProducer.connectedQueues), on every shard.

/**
 * Worker options per queue. Dispatch: a stalled send is never re-run (maxStalledCount 0) — the sweeper turns its
 * SENT operation into UNKNOWN instead.
 */
export function workerSettings(
  queue: QueueName,
  config: VerityConfig,
): Omit<WorkerOptions, 'connection'> & { concurrency: number } {
  // Stalled jobs are looked for once per lock window (BullMQ's default is every 30 s whatever the lock), so a job whose
  // worker died is released — and its SENT operation handed to the sweeper — within about one lock window.
  const base = {
    concurrency: config.WORKER_CONCURRENCY,
    lockDuration: config.DISPATCH_LOCK_MS,
    stalledInterval: config.DISPATCH_LOCK_MS,
  };
  switch (queue) {
    case QueueName.DISPATCH:
      return { ...base, maxStalledCount: 0 };
    case QueueName.SWEEP:
      return { ...base, concurrency: 1, maxStalledCount: 1 };
    default:
      return { ...base, maxStalledCount: 2 };
  }
}
