import type { INestApplicationContext } from '@nestjs/common';
import { ping, schemaMigratedProbe } from '@verity/persistence';
import {
  AuthFailureLimiter,
  LOGGER,
  Logger,
  OpsServer,
  RedisClient,
  VERITY_CONFIG,
  VerityConfig,
  queueJobs,
  startOpsServer,
} from '@verity/platform';
import { DataSource } from 'typeorm';
import { QueueName } from './names';
import { JobProducer } from './producer';
import { PRODUCER_REDIS } from './queues.module';

/** The states that make a queue's depth (completed jobs are history, kept only to deduplicate). */
export const QUEUE_DEPTH_STATES = ['waiting', 'prioritized', 'delayed', 'active', 'failed'] as const;

/**
 * Sets `verity_queue_jobs{queue,state}` from BullMQ's counters (a few Redis reads per queue and shard, nothing in
 * Postgres), summed over the queue's shards: a queue is one thing to an operator however it is spread. When Redis does
 * not answer, the series are dropped rather than left at their last value: no number beats a stale one.
 */
export async function refreshQueueDepth(producer: JobProducer, queues: readonly QueueName[]): Promise<void> {
  try {
    const counts = await Promise.all(
      queues.map(async (name) => {
        const perShard = await Promise.all(
          (await producer.connectedQueues(name)).map((queue) => queue.getJobCounts(...QUEUE_DEPTH_STATES)),
        );
        const sum: Record<string, number> = {};
        for (const state of QUEUE_DEPTH_STATES) sum[state] = perShard.reduce((n, c) => n + (c[state] ?? 0), 0);
        return sum;
      }),
    );
    queueJobs.reset();
    queues.forEach((queue, i) => {
      for (const state of QUEUE_DEPTH_STATES) queueJobs.set({ queue, state }, counts[i][state]);
    });
  } catch (error) {
    queueJobs.reset();
    throw error;
  }
}

/**
 * A worker's /metrics and /health on its own port (0 = none): readiness asks Postgres, whether its schema is migrated,
 * and Redis, and a scrape first reads the depth of the queues this worker consumes.
 */
export async function serveWorkerOps(
  app: INestApplicationContext,
  portVariable: 'DISPATCHER_METRICS_PORT' | 'RECONCILER_METRICS_PORT',
  queues: readonly QueueName[],
): Promise<OpsServer | null> {
  const config = app.get<VerityConfig>(VERITY_CONFIG);
  const port = config[portVariable];
  if (port === 0) return null;
  const db = app.get(DataSource);
  const redis = app.get<RedisClient>(PRODUCER_REDIS);
  const producer = app.get(JobProducer);
  try {
    return await startOpsServer({
      port,
      host: config.HOST,
      config,
      logger: app.get<Logger>(LOGGER),
      probes: {
        postgres: () => ping(db.manager),
        redis: () => redis.ping(),
        // The tables and columns its jobs use: a worker started before the migrations ran is not ready (503,
        // "schema": "down") until they have. Once there, it is not asked again (a schema is not un-migrated).
        schema: schemaMigratedProbe(db.manager),
      },
      beforeScrape: () => refreshQueueDepth(producer, queues),
      // The API's count (same Redis keys): an address's wrong guesses on any port count against it on every port.
      failures: new AuthFailureLimiter(redis, config.QUEUE_PREFIX, config.AUTH_FAILURES_PER_MINUTE),
    });
  } catch (error) {
    const why = error instanceof Error ? error.message : String(error);
    throw new Error(`cannot serve /metrics on ${config.HOST}:${port} (${portVariable}; 0 turns it off): ${why}`);
  }
}
