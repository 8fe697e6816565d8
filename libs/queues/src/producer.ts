import { Queue } from 'bullmq';
import type { JobsOptions, Telemetry } from 'bullmq';
import type { Redis } from 'ioredis';
import { JobName, JobPayloads, QUEUE_OF_JOB, QueueName, queueOptions } from './names';

/**
 * Enqueues jobs. Producers share one fail-fast connection (no offline queue): when Redis is away an enqueue
 * throws at once, and the sweeper, reading Postgres, owes the job instead.
 */
export class JobProducer {
  private readonly queues = new Map<QueueName, Queue>();
  private failures = 0;
  private attempt: Promise<void> | null = null;

  /**
   * `onEnqueueFailure` hears of every enqueue that `tryEnqueue` could not make (logged by the apps): the sweeper
   * repairs it, but an operator must be able to see that it is repairing.
   */
  constructor(
    private readonly connection: Redis,
    private readonly prefix: string,
    private readonly onEnqueueFailure?: (job: JobName, error: unknown, failuresSoFar: number) => void,
    /** With traces on (`queueTelemetry`), each job carries the trace context it was enqueued in. */
    private readonly telemetry?: Telemetry,
  ) {}

  /** Enqueues `tryEnqueue` could not make since this process started (exported as verity_enqueue_failures_total). */
  get enqueueFailures(): number {
    return this.failures;
  }

  queue(name: QueueName): Queue {
    let queue = this.queues.get(name);
    if (!queue) {
      const created = new Queue(name, queueOptions(name, this.connection, this.prefix, this.telemetry));
      created.on('error', () => undefined);
      this.queues.set(name, created);
      // BullMQ checks the connection once, when a Queue is built, and keeps the answer: a Queue first used while Redis
      // was going away (or away) rejects every later call for good, although the shared connection comes back. Such
      // a Queue is forgotten, so the next call builds a new one on the reconnected connection. (Seen as a dispatcher
      // that never enqueued a dispatch job again after Redis restarted empty.)
      created.waitUntilReady().catch(() => {
        if (this.queues.get(name) === created) this.queues.delete(name);
        void created.close().catch(() => undefined);
      });
      queue = created;
    }
    return queue;
  }

  /**
   * The queue, for a call that must fail at once while Redis is away, as the producer's connection promises. A Queue
   * this producer has not used yet (or has just rebuilt) waits, in BullMQ, for the connection to come back before its
   * first command, however long the outage: an intake request would hang on its enqueue, and a scrape on the queue
   * depth, instead of leaving the job to the sweeper. A connection attempt under way (the first one, at start) is
   * waited for: it ends within the connection's connect timeout, ready or not.
   */
  async connectedQueue(name: QueueName): Promise<Queue> {
    const redis = this.connection;
    if (redis.status === 'connecting' || redis.status === 'connect') await this.connectAttempt();
    if (redis.status !== 'ready') throw new Error(`Redis is not connected (${redis.status})`);
    return this.queue(name);
  }

  /** The connection attempt under way, awaited by every caller at once (one pair of listeners, not one per call). */
  private connectAttempt(): Promise<void> {
    const redis = this.connection;
    this.attempt ??= new Promise<void>((resolve, reject) => {
      const ready = () => {
        redis.off('close', closed);
        resolve();
      };
      const closed = () => {
        redis.off('ready', ready);
        reject(new Error('Redis is not connected (the connection attempt failed)'));
      };
      redis.once('ready', ready);
      redis.once('close', closed);
    }).finally(() => {
      this.attempt = null;
    });
    return this.attempt;
  }

  async enqueue<N extends JobName>(name: N, data: JobPayloads[N], options: JobsOptions = {}): Promise<void> {
    await (await this.connectedQueue(QUEUE_OF_JOB[name])).add(name, data, options);
  }

  /** For callers that must not fail after a commit: the sweeper repairs a missed enqueue. */
  async tryEnqueue<N extends JobName>(name: N, data: JobPayloads[N], options: JobsOptions = {}): Promise<boolean> {
    try {
      await this.enqueue(name, data, options);
      return true;
    } catch (error) {
      this.failures += 1;
      this.onEnqueueFailure?.(name, error, this.failures);
      return false;
    }
  }

  async close(): Promise<void> {
    await Promise.all([...this.queues.values()].map((q) => q.close().catch(() => undefined)));
    this.queues.clear();
  }
}
