import { BeforeApplicationShutdown, OnApplicationBootstrap } from '@nestjs/common';
import { RedisClient, createRedisClient, redisTarget } from '@verity/platform';
import type { Logger, VerityConfig } from '@verity/platform';
import { Job, Worker } from 'bullmq';
import { QueueName } from './names';
import { QueueShards } from './shards';
import { queueTelemetry } from './telemetry';
import { closeWorker, watchWorker } from './watchdog';
import { workerSettings } from './worker.module';

/**
 * The base of every Verity worker: one BullMQ Worker per consumed shard of one queue, built at bootstrap from the
 * injected config (not from a decorator evaluated at import time, which would read the environment before the app
 * validated it), watched (a worker that stops running is started again) and closed first on shutdown (no new jobs; the
 * active ones finish). A subclass only says which queue it consumes and how it processes a job.
 */
export abstract class QueueWorker implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private built: Worker[] | null = null;
  private template: RedisClient | null = null;
  private stopWatching: (() => void)[] = [];
  /** The jobs running in this process (their processing, until it settles). */
  private readonly running = new Set<Promise<string>>();

  protected constructor(
    private readonly queueName: QueueName,
    private readonly workerConfig: VerityConfig,
    protected readonly logger: Logger,
  ) {}

  /** The BullMQ workers, one per consumed shard (after bootstrap; none when this process consumes no shard of it). */
  get workers(): readonly Worker[] {
    if (!this.built) throw new Error(`the ${this.queueName} worker is not built before bootstrap`);
    return this.built;
  }

  /** The first shard's worker (the only one with a single shard). */
  get worker(): Worker {
    const [first] = this.workers;
    if (!first) throw new Error(`this process consumes no shard of the ${this.queueName} queue`);
    return first;
  }

  onApplicationBootstrap(): void {
    const config = this.workerConfig;
    const shards = QueueShards.of(config);
    const consumed = shards.consumed(this.queueName);
    // Each shard's worker has its share of WORKER_CONCURRENCY, so a process runs about as many jobs at once (and needs
    // about as many Postgres connections) whatever the shard count.
    const settings = workerSettings(this.queueName, config);
    const concurrency = Math.max(1, Math.ceil(settings.concurrency / Math.max(1, consumed.length)));
    // A cluster connection is passed as a client that BullMQ duplicates (and owns) for each worker; it is never
    // connected itself. One server: options, as before.
    this.template = config.REDIS_CLUSTER_NODES
      ? createRedisClient(config, 'worker', `verity-${this.queueName}`, true)
      : null;
    this.built = consumed.map(
      (shard) =>
        new Worker(this.queueName, (job, token) => this.tracked(this.process(job, token)), {
          connection: this.template ?? { url: redisTarget(config.REDIS_URL), maxRetriesPerRequest: null },
          prefix: shards.prefixOf(shard),
          telemetry: queueTelemetry(config),
          ...settings,
          concurrency,
        }),
    );
    this.stopWatching = this.built.map((worker) => watchWorker(worker, this.logger));
  }

  /** Resolves when every worker's connection is ready. */
  async ready(): Promise<void> {
    await Promise.all(this.workers.map((worker) => worker.waitUntilReady()));
  }

  /**
   * Whether the worker that took `job` still holds its lock (BullMQ keeps it at `<job key>:lock`, valued with the
   * token); null when it cannot tell.
   */
  protected async holdsLock(job: Job, token: string | undefined): Promise<boolean | null> {
    if (!job.id || !token) return null;
    try {
      const worker = this.workers.find((w) => w.qualifiedName === job.queueQualifiedName);
      if (!worker) return null;
      const client = await worker.getBackend().client;
      return (await client.get(`${worker.toKey(job.id)}:lock`)) === token;
    } catch {
      return null;
    }
  }

  private tracked(processing: Promise<string>): Promise<string> {
    this.running.add(processing);
    const done = () => void this.running.delete(processing);
    processing.then(done, done);
    return processing;
  }

  /** The jobs running in this process, for the close. */
  private readonly jobs = {
    busy: (): boolean => this.running.size > 0,
    idle: async (): Promise<void> => {
      while (this.running.size > 0) await Promise.allSettled([...this.running]);
    },
  };

  async beforeApplicationShutdown(): Promise<void> {
    for (const stop of this.stopWatching) stop();
    this.stopWatching = [];
    await Promise.all((this.built ?? []).map((worker) => closeWorker(worker, this.logger, this.jobs)));
    this.template?.disconnect();
  }

  abstract process(job: Job, token?: string): Promise<string>;
}
