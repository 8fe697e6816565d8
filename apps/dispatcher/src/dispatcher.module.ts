import { Inject, Module, OnApplicationShutdown } from '@nestjs/common';
import { ConnectorsModule } from '@verity/connectors';
import { PersistenceModule } from '@verity/persistence';
import { DataSource } from 'typeorm';
import { LOGGER, Logger, PlatformModule, VerityConfig } from '@verity/platform';
import { QueueName, QueuesModule } from '@verity/queues';
import { DispatchProcessor } from './dispatch.processor';
import { ExecutionsProcessor } from './executions.processor';
import { LifecycleService } from './lifecycle.service';
import { OutcomeService } from './outcome.service';
import { SenderService } from './sender.service';

/** The queues the dispatcher consumes (and reports the depth of on its /metrics). */
export const DISPATCHER_QUEUES = [QueueName.EXECUTIONS, QueueName.DISPATCH] as const;

@Module({})
export class DispatcherModule implements OnApplicationShutdown {
  constructor(
    private readonly sender: SenderService,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  /**
   * `dataSource`: the one its main opened (openAppDataSource); `logger`: its main's (startProcess). None in a test that
   * builds the module alone.
   */
  static forRoot(config: VerityConfig, dataSource?: DataSource, logger?: Logger) {
    return {
      module: DispatcherModule,
      imports: [
        PlatformModule.forRoot('dispatcher', config, logger),
        PersistenceModule.forRoot(dataSource),
        QueuesModule,
        ConnectorsModule,
      ],
      providers: [LifecycleService, OutcomeService, SenderService, ExecutionsProcessor, DispatchProcessor],
    };
  }

  async onApplicationShutdown(): Promise<void> {
    // The workers have already stopped taking jobs and finished their active ones (beforeApplicationShutdown).
    await this.sender.drain();
    this.logger.info('in-flight sends drained');
  }
}
