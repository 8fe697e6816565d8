import { Inject, Module, OnApplicationShutdown } from '@nestjs/common';
import { ConnectorsModule } from '@verity/connectors';
import { DataSource } from 'typeorm';
import { LOGGER, Logger, VerityConfig } from '@verity/platform';
import { QueueName, appModules } from '@verity/queues';
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

  /** `dataSource`, `logger`: see appModules. */
  static forRoot(config: VerityConfig, dataSource?: DataSource, logger?: Logger) {
    return {
      module: DispatcherModule,
      imports: [...appModules('dispatcher', config, dataSource, logger), ConnectorsModule],
      providers: [LifecycleService, OutcomeService, SenderService, ExecutionsProcessor, DispatchProcessor],
    };
  }

  async onApplicationShutdown(): Promise<void> {
    // The workers have already stopped taking jobs and finished their active ones (beforeApplicationShutdown).
    await this.sender.drain();
    this.logger.info('in-flight sends drained');
  }
}
