import { BeforeApplicationShutdown, Inject, Module, OnApplicationBootstrap } from '@nestjs/common';
import { ConnectorsModule } from '@verity/connectors';
import { DataSource } from 'typeorm';
import { LOGGER, Logger, RedisClient, VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { JobProducer, PRODUCER_REDIS, QueueName, SweepSchedule, appModules } from '@verity/queues';
import { ReconcileProcessor, SweepProcessor, VerifyProcessor, WebhooksProcessor } from './reconciler.processors';
import { SchemaGate } from './schema-gate';
import { SweeperService } from './sweeper.service';
import { VerificationService } from './verification.service';
import { WebhooksService } from './webhooks.service';

/** The queues the reconciler consumes (and reports the depth of on its /metrics). */
export const RECONCILER_QUEUES = [QueueName.VERIFY, QueueName.RECONCILE, QueueName.SWEEP, QueueName.WEBHOOKS] as const;

@Module({})
export class ReconcilerModule implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly sweepSchedule: SweepSchedule;

  constructor(
    producer: JobProducer,
    @Inject(PRODUCER_REDIS) redis: RedisClient,
    @Inject(VERITY_CONFIG) config: VerityConfig,
    @Inject(LOGGER) logger: Logger,
  ) {
    // Checked every few sweeps: cheap (two reads), and a lost schedule is found within seconds even if no reconnect
    // was seen (Redis restarted between two reconnect attempts, or a FLUSHALL).
    this.sweepSchedule = new SweepSchedule(
      producer,
      redis,
      {
        everyMs: config.SWEEP_INTERVAL_MS,
        checkEveryMs: Math.max(1_000, 5 * config.SWEEP_INTERVAL_MS),
      },
      logger,
    );
  }

  /** `dataSource`, `logger`: see appModules. */
  static forRoot(config: VerityConfig, dataSource?: DataSource, logger?: Logger) {
    return {
      module: ReconcilerModule,
      imports: [...appModules('reconciler', config, dataSource, logger), ConnectorsModule],
      providers: [
        SchemaGate,
        VerificationService,
        SweeperService,
        VerifyProcessor,
        ReconcileProcessor,
        SweepProcessor,
        WebhooksService,
        WebhooksProcessor,
      ],
    };
  }

  /** The sweep schedule lives in Redis, which may forget it: asserted at boot, after every reconnect, periodically. */
  async onApplicationBootstrap(): Promise<void> {
    await this.sweepSchedule.start();
  }

  /** Before the producer's connection closes (the last hooks): a check under way ends first. */
  async beforeApplicationShutdown(): Promise<void> {
    await this.sweepSchedule.stop();
  }
}
