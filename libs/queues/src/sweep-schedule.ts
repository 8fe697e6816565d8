import type { RedisClient } from '@verity/platform';
import type { Logger } from 'pino';
import { hostname } from 'node:os';
import { JobName, QueueName } from './names';
import type { JobProducer } from './producer';
import { HOME_SHARD } from './shards';

/** The one job scheduler that drives the sweep. Upserting it under the same id keeps a single entry in Redis. */
export const SWEEP_SCHEDULER_ID = 'sweep';

/**
 * A key written when a reconciler starts and kept in Redis for good, one per queue shard (pass the shard's prefix).
 * Found missing after a reconnect (or by a periodic check), it means Redis — or, on a cluster, the node holding that
 * shard — came back without its data: every job queued there (and, on the home shard, the sweep schedule) went with it.
 */
export function redisMarkerKey(prefix: string): string {
  return `${prefix}:marker`;
}

export interface SweepScheduleOptions {
  /** How often the sweep runs (SWEEP_INTERVAL_MS). */
  everyMs: number;
  /** How often this process checks that the marker and the schedule are still in Redis. */
  checkEveryMs: number;
}

export type ScheduleCheck = 'boot' | 'reconnect' | 'periodic';

/**
 * Keeps the repeatable sweep registered in Redis, whatever Redis forgets. Redis is not the truth (Postgres is), so a
 * Redis that restarts empty loses only triggers; but the sweep is the trigger that re-derives every other one, so it
 * must never be lost. Every reconciler re-asserts the schedule at boot and after every reconnect, and checks it
 * periodically; the schedule's fixed id keeps one entry however many do, and the sweep's Postgres advisory lock still
 * lets only one sweep run at a time.
 *
 * It works on the producers' fail-fast connection: while Redis is away a check fails at once (and the next one tries
 * again) instead of queueing commands.
 */
export class SweepSchedule {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  /** The shards whose marker this process has seen in Redis (written or found): its absence later is news. */
  private readonly markersKnown = new Set<number>();
  private unavailable = false;
  private stopped = false;
  private readonly onReady = (): void => void this.check('reconnect');

  constructor(
    private readonly producer: JobProducer,
    private readonly redis: RedisClient,
    private readonly options: SweepScheduleOptions,
    private readonly logger: Logger,
  ) {}

  async start(): Promise<void> {
    // ioredis emits 'ready' after every (re)connection.
    this.redis.on('ready', this.onReady);
    if (this.redis.status !== 'ready') await waitForReady(this.redis, BOOT_WAIT_MS);
    await this.check('boot');
    this.timer = setInterval(() => void this.check('periodic'), this.options.checkEveryMs);
    this.timer.unref();
  }

  /**
   * No check from now on; resolves when the one under way (if any) has ended. On shutdown it is awaited before the
   * producer's connection closes: closed under it, the check failed and said Redis could not be reached.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    this.redis.off('ready', this.onReady);
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    // No check joins the chain once stopped: its tail is the last one.
    await this.running;
  }

  /** One check at a time: a reconnect during a periodic check waits for it instead of racing it. None once stopped. */
  check(trigger: ScheduleCheck): Promise<void> {
    if (this.stopped) return Promise.resolve();
    const previous = this.running ?? Promise.resolve();
    const next = previous.then(() => this.checkOnce(trigger));
    // The chain's tail is what is compared (it was `next`, which `running` never held: it was never let go).
    const tail = next.finally(() => {
      if (this.running === tail) this.running = null;
    });
    this.running = tail;
    return next;
  }

  private async checkOnce(trigger: ScheduleCheck): Promise<void> {
    try {
      // Every shard's marker: on a cluster each shard may sit on a node of its own, which may come back empty alone.
      let written: 'OK' | null = null;
      const { shards } = this.producer;
      for (const shard of shards.all()) {
        const key = redisMarkerKey(shards.prefixOf(shard));
        const set = await this.redis.set(key, `${hostname()}:${process.pid} ${new Date().toISOString()}`, 'NX');
        // An absent marker is news only to a process that saw it before: at boot it is a Redis never used (or the
        // first reconciler to start).
        if (set === 'OK' && this.markersKnown.has(shard)) {
          this.logger.warn(
            { marker: key, shard, trigger },
            shard === HOME_SHARD
              ? 'Redis came back EMPTY (its marker key was gone): every queued job and the sweep schedule were lost. ' +
                  'Re-adding the sweep schedule; the sweep re-derives the owed work from Postgres, nothing accepted is lost'
              : 'a queue shard came back EMPTY (its marker key was gone): its queued jobs were lost. The sweep ' +
                  're-derives the owed work from Postgres, nothing accepted is lost',
          );
        }
        this.markersKnown.add(shard);
        if (shard === HOME_SHARD) written = set;
      }
      const queue = await this.producer.connectedQueue(QueueName.SWEEP, HOME_SHARD);
      // A periodic check with the marker in place only looks; boot, a reconnect or an emptied Redis always upsert.
      if (trigger === 'periodic' && written !== 'OK' && (await queue.getJobScheduler(SWEEP_SCHEDULER_ID))) {
        this.unavailable = false;
        return;
      }
      await queue.upsertJobScheduler(
        SWEEP_SCHEDULER_ID,
        { every: this.options.everyMs },
        { name: JobName.SWEEP, data: {}, opts: { removeOnComplete: true, removeOnFail: { count: 100 } } },
      );
      if (trigger === 'periodic' && written !== 'OK') {
        this.logger.warn({ scheduler: SWEEP_SCHEDULER_ID }, 'the sweep schedule was missing from Redis: re-added');
      } else if (trigger !== 'boot') {
        this.logger.info({ scheduler: SWEEP_SCHEDULER_ID, trigger }, 'sweep schedule re-asserted');
      }
      this.unavailable = false;
    } catch (error) {
      // Once per outage: while Redis is away every check fails the same way. The next reconnect or tick retries.
      if (!this.unavailable) {
        this.unavailable = true;
        this.logger.warn({ err: error, trigger }, 'cannot check the sweep schedule in Redis; retrying');
      }
    }
  }
}

const BOOT_WAIT_MS = 10_000;

/** Resolves when the connection is ready or after timeoutMs (the check then fails, is logged and retried). */
function waitForReady(redis: RedisClient, timeoutMs: number): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      redis.off('ready', done);
      resolve();
    };
    const timer = setTimeout(done, timeoutMs);
    redis.once('ready', done);
  });
}
