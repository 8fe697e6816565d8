import { BullModule } from '@nestjs/bullmq';
import { DynamicModule, Module } from '@nestjs/common';
import { VERITY_CONFIG, VerityConfig, redisTarget } from '@verity/platform';
import type { WorkerOptions } from 'bullmq';
import { JOB_DEFAULTS, QueueName } from './names';
import { queueTelemetry } from './telemetry';

/**
 * The queues a worker app injects (`@InjectQueue`), on the worker connection. The workers themselves are QueueWorker
 * providers (queue-worker.ts), built at bootstrap from the injected config.
 */
@Module({})
export class WorkerQueuesModule {
  static forRoot(queues: QueueName[]): DynamicModule {
    return {
      module: WorkerQueuesModule,
      imports: [
        BullModule.forRootAsync({
          inject: [VERITY_CONFIG],
          useFactory: (config: VerityConfig) => ({
            connection: { url: redisTarget(config.REDIS_URL), maxRetriesPerRequest: null },
            prefix: config.QUEUE_PREFIX,
            telemetry: queueTelemetry(config),
          }),
        }),
        ...queues.map((name) => BullModule.registerQueue({ name, defaultJobOptions: JOB_DEFAULTS[name] })),
      ],
      exports: [BullModule],
    };
  }
}

/**
 * Worker options per queue. Dispatch: a stalled send is never re-run (maxStalledCount 0) — the sweeper turns its
 * SENT operation into UNKNOWN instead.
 */
export function workerSettings(queue: QueueName, config: VerityConfig): Omit<WorkerOptions, 'connection'> {
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
