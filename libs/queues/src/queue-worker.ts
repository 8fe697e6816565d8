import { BeforeApplicationShutdown, OnApplicationBootstrap } from '@nestjs/common';
import { redisTarget, type Logger, type VerityConfig } from '@verity/platform';
import { Job, Worker } from 'bullmq';
import { QueueName } from './names';
import { queueTelemetry } from './telemetry';
import { closeWorker, watchWorker } from './watchdog';
import { workerSettings } from './worker.module';

/**
 * The base of every Verity worker: one BullMQ Worker on one queue, built at bootstrap from the injected config (not
 * from a decorator evaluated at import time, which would read the environment before the app validated it), watched
 * (a worker that stops running is started again) and closed first on shutdown (no new jobs; the active ones finish).
 * A subclass only says which queue it consumes and how it processes a job.
 */
export abstract class QueueWorker implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private built: Worker | null = null;
  private stopWatching: () => void = () => undefined;

  protected constructor(
    private readonly queueName: QueueName,
    private readonly workerConfig: VerityConfig,
    protected readonly logger: Logger,
  ) {}

  /** The BullMQ worker (after bootstrap). */
  get worker(): Worker {
    if (!this.built) throw new Error(`the ${this.queueName} worker is not built before bootstrap`);
    return this.built;
  }

  onApplicationBootstrap(): void {
    const config = this.workerConfig;
    this.built = new Worker(this.queueName, (job, token) => this.process(job, token), {
      connection: { url: redisTarget(config.REDIS_URL), maxRetriesPerRequest: null },
      prefix: config.QUEUE_PREFIX,
      telemetry: queueTelemetry(config),
      ...workerSettings(this.queueName, config),
    });
    this.stopWatching = watchWorker(this.built, this.logger);
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.stopWatching();
    if (this.built) await closeWorker(this.built, this.logger);
  }

  abstract process(job: Job, token?: string): Promise<string>;
}
