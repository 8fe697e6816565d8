import { InjectQueue } from '@nestjs/bullmq';
import { Inject, Module, OnApplicationBootstrap } from '@nestjs/common';
import { ConnectorRegistry } from '@verity/connectors';
import { PersistenceModule } from '@verity/persistence';
import { PlatformModule, VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { JobName, QueueName, QueuesModule, WorkerQueuesModule } from '@verity/queues';
import type { Queue } from 'bullmq';
import { ReconcileProcessor, SweepProcessor, VerifyProcessor } from './reconciler.processors';
import { SweeperService } from './sweeper.service';
import { VerificationService } from './verification.service';

@Module({})
export class ReconcilerModule implements OnApplicationBootstrap {
  constructor(
    @InjectQueue(QueueName.SWEEP) private readonly sweepQueue: Queue,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
  ) {}

  static forRoot(config: VerityConfig) {
    return {
      module: ReconcilerModule,
      imports: [
        PlatformModule.forRoot('reconciler', config),
        PersistenceModule,
        QueuesModule,
        WorkerQueuesModule.forRoot([QueueName.VERIFY, QueueName.RECONCILE, QueueName.SWEEP, QueueName.DISPATCH]),
      ],
      providers: [
        { provide: ConnectorRegistry, useValue: new ConnectorRegistry() },
        VerificationService,
        SweeperService,
        VerifyProcessor,
        ReconcileProcessor,
        SweepProcessor,
      ],
    };
  }

  async onApplicationBootstrap(): Promise<void> {
    await this.sweepQueue.upsertJobScheduler(
      'sweep',
      { every: this.config.SWEEP_INTERVAL_MS },
      { name: JobName.SWEEP, data: {}, opts: { removeOnComplete: true, removeOnFail: { count: 100 } } },
    );
  }
}
