import { Processor, WorkerHost } from '@nestjs/bullmq';
import { BeforeApplicationShutdown, Inject, OnApplicationBootstrap } from '@nestjs/common';
import { LOGGER, Logger, loadConfig } from '@verity/platform';
import { JobName, JobPayloads, QueueName, closeWorker, watchWorker, workerSettings } from '@verity/queues';
import type { Job } from 'bullmq';
import { LifecycleService } from './lifecycle.service';

type Handlers = { [N in JobName.ADVANCE_EXECUTION]: (data: JobPayloads[N]) => Promise<string> };

/** Thin shell: parse the job, call one service method. Errors propagate so BullMQ retries the advance. */
@Processor(QueueName.EXECUTIONS, workerSettings(QueueName.EXECUTIONS, loadConfig()))
export class ExecutionsProcessor extends WorkerHost implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly handlers: Handlers;

  constructor(
    lifecycle: LifecycleService,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    super();
    this.handlers = { [JobName.ADVANCE_EXECUTION]: (data) => lifecycle.advance(data.executionId) };
  }

  onApplicationBootstrap(): void {
    watchWorker(this.worker, this.logger);
  }

  async beforeApplicationShutdown(): Promise<void> {
    await closeWorker(this.worker, this.logger);
  }

  async process(job: Job): Promise<string> {
    const handler = this.handlers[job.name as JobName.ADVANCE_EXECUTION];
    if (!handler) throw new Error(`no handler for job ${job.name} on ${QueueName.EXECUTIONS}`);
    return handler(job.data as JobPayloads[JobName.ADVANCE_EXECUTION]);
  }
}
