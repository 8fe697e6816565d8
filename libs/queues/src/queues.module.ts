import { Global, Inject, Module, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { announceEventsWith } from '@verity/persistence';
import {
  LOGGER,
  Logger,
  RedisClient,
  VERITY_CONFIG,
  VerityConfig,
  createRedisClient,
  enqueueFailures,
} from '@verity/platform';
import { DataSource } from 'typeorm';
import { eventsChannel } from './names';
import { JobProducer } from './producer';
import { QueueShards } from './shards';
import { queueTelemetry } from './telemetry';
import { WebhookDeliveryQueue } from './webhook-delivery-queue';

export const PRODUCER_REDIS = Symbol('PRODUCER_REDIS');

const ANNOUNCE_COALESCE_MS = 2;

@Global()
@Module({
  providers: [
    {
      provide: PRODUCER_REDIS,
      inject: [VERITY_CONFIG],
      // One server (REDIS_URL) or a Redis Cluster (REDIS_CLUSTER_NODES): the same fail-fast producer either way.
      useFactory: (config: VerityConfig) => createRedisClient(config, 'producer', 'verity-producer'),
    },
    {
      provide: JobProducer,
      inject: [PRODUCER_REDIS, VERITY_CONFIG, LOGGER],
      useFactory: (redis: RedisClient, config: VerityConfig, logger: Logger) => {
        // At most one line a second while Redis is away, with the count, so an outage does not flood the log.
        let lastLogged = 0;
        return new JobProducer(
          redis,
          QueueShards.of(config),
          (job, error, failures) => {
            enqueueFailures.inc({ job });
            if (Date.now() - lastLogged < 1000) return;
            lastLogged = Date.now();
            logger.warn(
              { job, failures, err: error instanceof Error ? error.message : String(error) },
              'enqueue failed: the sweeper re-enqueues this work from Postgres',
            );
          },
          queueTelemetry(config),
        );
      },
    },
    WebhookDeliveryQueue,
  ],
  exports: [JobProducer, PRODUCER_REDIS, WebhookDeliveryQueue],
})
export class QueuesModule implements OnModuleInit, OnApplicationShutdown {
  constructor(
    private readonly producer: JobProducer,
    @Inject(PRODUCER_REDIS) private readonly redis: RedisClient,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    @InjectDataSource() private readonly dataSource: DataSource,
  ) {}

  private pending = new Set<string>();
  private flushTimer: NodeJS.Timeout | null = null;

  /**
   * Committed events are announced on Redis, where the API's streams listen. Fire and forget: with Redis away the
   * streams poll the events table instead, so nothing is lost, only later. Announcements made within a couple of
   * milliseconds go out as one message (ids joined by commas): under load that is one PUBLISH instead of dozens. The
   * channel is QUEUE_PREFIX's, not a shard's: on a Redis Cluster a PUBLISH reaches subscribers on every node.
   */
  onModuleInit(): void {
    announceEventsWith(this.dataSource, (executionId) => {
      this.pending.add(executionId);
      this.flushTimer ??= setTimeout(() => void this.publishPending(), ANNOUNCE_COALESCE_MS);
    });
  }

  /** One PUBLISH of what is waiting; settles when Redis answered (or refused: the streams' poll catches up then). */
  private async publishPending(): Promise<void> {
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    const ids = [...this.pending].join(',');
    this.pending.clear();
    if (ids) await this.redis.publish(eventsChannel(this.config.QUEUE_PREFIX), ids).catch(() => undefined);
  }

  async onApplicationShutdown(): Promise<void> {
    announceEventsWith(this.dataSource, null);
    // What was committed in the last couple of milliseconds is announced before the connection closes: dropped, a
    // stream would show it only at its next poll.
    await this.publishPending();
    await this.producer.close();
    this.redis.disconnect();
  }
}
