import { Inject, Injectable } from '@nestjs/common';
import { LOGGER, Logger, VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { JobName, JobPayloads, QueueName, QueueWorker } from '@verity/queues';
import type { Job } from 'bullmq';
import { LifecycleService } from './lifecycle.service';

type Handlers = { [N in JobName.ADVANCE_EXECUTION]: (data: JobPayloads[N]) => Promise<string> };

/** Thin shell: parse the job, call one service method. Errors propagate so BullMQ retries the advance. */
@Injectable()
export class ExecutionsProcessor extends QueueWorker {
  private readonly handlers: Handlers;

  constructor(
    lifecycle: LifecycleService,
    @Inject(LOGGER) logger: Logger,
    @Inject(VERITY_CONFIG) config: VerityConfig,
  ) {
    super(QueueName.EXECUTIONS, config, logger);
    this.handlers = { [JobName.ADVANCE_EXECUTION]: (data) => lifecycle.advance(data.executionId) };
  }

  async process(job: Job): Promise<string> {
    const handler = this.handlers[job.name as JobName.ADVANCE_EXECUTION];
    if (!handler) throw new Error(`no handler for job ${job.name} on ${QueueName.EXECUTIONS}`);
    return handler(job.data as JobPayloads[JobName.ADVANCE_EXECUTION]);
  }
}
