import { Queue } from 'bullmq';
import type { JobsOptions, Telemetry } from 'bullmq';
import type { RedisClient } from '@verity/platform';
import { JobName, JobPayloads, QUEUE_OF_JOB, QueueName, queueOptions } from './names';
import { HOME_SHARD, QueueShards } from './shards';

/**
 * Enqueues jobs, each on its shard (shards.ts). Producers share one fail-fast connection (no offline queue): when Redis
 * is away an enqueue throws at once, and the sweeper, reading Postgres, owes the job instead.
 */
export class JobProducer {
  private readonly queues = new Map<string, Queue>();
  private failures = 0;
  private attempt: Promise<void> | null = null;
  readonly shards: QueueShards;

  /**
   * `onEnqueueFailure` hears of every enqueue that `tryEnqueue` could not make (logged by the apps): the sweeper
   * repairs it, but an operator must be able to see that it is repairing. A bare prefix means one shard.
   */
  constructor(
    private readonly connection: RedisClient,
    shards: QueueShards | string,
    private readonly onEnqueueFailure?: (job: JobName, error: unknown, failuresSoFar: number) => void,
    /** With traces on (`queueTelemetry`), each job carries the trace context it was enqueued in. */
    private readonly telemetry?: Telemetry,
  ) {
    this.shards = typeof shards === 'string' ? new QueueShards(shards) : shards;
  }

  /** Enqueues `tryEnqueue` could not make since this process started (exported as verity_enqueue_failures_total). */
  get enqueueFailures(): number {
    return this.failures;
  }

  /** One shard's queue (the home shard's by default: the only one with a single shard). */
  queue(name: QueueName, shard = HOME_SHARD): Queue {
    const key = `${name}#${shard}`;
    let queue = this.queues.get(key);
    if (!queue) {
      const prefix = this.shards.prefixOf(shard);
      const created = new Queue(name, queueOptions(name, this.connection, prefix, this.telemetry));
      created.on('error', () => undefined);
      this.queues.set(key, created);
      // BullMQ checks the connection once, when a Queue is built, and keeps the answer: a Queue first used while Redis
      // was going away (or away) rejects every later call for good, although the shared connection comes back. Such
      // a Queue is forgotten, so the next call builds a new one on the reconnected connection. (Seen as a dispatcher
      // that never enqueued a dispatch job again after Redis restarted empty.)
      created.waitUntilReady().catch(() => {
        if (this.queues.get(key) === created) this.queues.delete(key);
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
  async connectedQueue(name: QueueName, shard = HOME_SHARD): Promise<Queue> {
    await this.attemptOver();
    const status = this.connection.status;
    if (status !== 'ready') throw new Error(`Redis is not connected (${status})`);
    return this.queue(name, shard);
  }

  /** The queue on every shard it exists on (depth, the sweeper's look at live dispatches), failing fast likewise. */
  async connectedQueues(name: QueueName): Promise<Queue[]> {
    const queues: Queue[] = [];
    for (const shard of this.shards.shardsOf(name)) queues.push(await this.connectedQueue(name, shard));
    return queues;
  }

  /**
   * Every queue on every shard, each with what to put before its name where an operator sees it (Bull Board, whose
   * queues must have distinct names): nothing with one shard, `<shard>.` with more (`0.dispatch`, `1.dispatch`, …).
   */
  async everyQueue(): Promise<{ queue: Queue; namePrefix: string }[]> {
    // Bull Board keeps these Queue objects for the life of the process. Built while a Redis Cluster client is still
    // connecting, a Queue's first command fails at once (no offline queue) and BullMQ keeps that failure: wait for the
    // connection attempt under way (bounded by its connect timeout; a Redis that is down at boot is not waited for).
    await this.attemptOver().catch(() => undefined);
    return Object.values(QueueName).flatMap((name) =>
      this.shards.shardsOf(name).map((shard) => ({
        queue: this.queue(name, shard),
        namePrefix: this.shards.count === 1 ? '' : `${shard}.`,
      })),
    );
  }

  /** Resolves at once unless a connection attempt is under way; then when it ends (rejects if it failed). */
  private async attemptOver(): Promise<void> {
    const status = this.connection.status;
    if (status === 'connecting' || status === 'connect') await this.connectAttempt();
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
    await (await this.queueOf(name, data)).add(name, data, options);
  }

  /**
   * Enqueues a job under its deterministic id, or re-arms it. A job of that id still waiting, delayed or active is left
   * to run (the add would be a no-op anyway); one that finished — completed or failed, kept for its retention — would
   * swallow the add, so it is removed and the job enqueued again. One HMGET of the job's hash tells which (rather than
   * fetching the whole job and running BullMQ's state script): 'timestamp' is set when a job is added, 'finishedOn' when
   * it completes or fails for good. Whether a job was added (false: a pending one was left to run). `options` are the
   * job's own (attempts, backoff, priority), as a first add would give them.
   */
  async enqueueOrRearm<N extends JobName>(
    name: N,
    data: JobPayloads[N],
    jobId: string,
    options: JobsOptions = {},
  ): Promise<boolean> {
    const queue = await this.queueOf(name, data);
    const client = await queue.getBackend().client;
    const [addedAt, finishedOn] = await client.hmget(queue.toKey(jobId), 'timestamp', 'finishedOn');
    if (addedAt !== null && finishedOn === null) return false;
    if (finishedOn !== null) await queue.remove(jobId).catch(() => undefined);
    await queue.add(name, data, { ...options, jobId });
    return true;
  }

  /** The queue (of its shard) a job with this name and data goes to, failing fast like connectedQueue. */
  queueOf<N extends JobName>(name: N, data: JobPayloads[N]): Promise<Queue> {
    return this.connectedQueue(QUEUE_OF_JOB[name], this.shards.shardOf(name, data));
  }

  /** For callers that must not fail after a commit: the sweeper repairs a missed enqueue. */
  async tryEnqueue<N extends JobName>(name: N, data: JobPayloads[N], options: JobsOptions = {}): Promise<boolean> {
    return this.orRecordFailure(name, async () => {
      await this.enqueue(name, data, options);
      return true;
    });
  }

  /** enqueueOrRearm for callers that must not fail after a commit, failures counted as tryEnqueue's are. */
  tryEnqueueOrRearm<N extends JobName>(
    name: N,
    data: JobPayloads[N],
    jobId: string,
    options: JobsOptions = {},
  ): Promise<boolean> {
    return this.orRecordFailure(name, () => this.enqueueOrRearm(name, data, jobId, options));
  }

  private async orRecordFailure(name: JobName, enqueue: () => Promise<boolean>): Promise<boolean> {
    try {
      return await enqueue();
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
