import { Inject, Injectable } from '@nestjs/common';
import { LOGGER, Logger, VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { JobName, JobPayloads, QueueName, QueueWorker } from '@verity/queues';
import type { Job } from 'bullmq';
import { LifecycleService, SendNow } from './lifecycle.service';
import { SenderService } from './sender.service';

type Handlers = {
  [N in JobName.ADVANCE_EXECUTION]: (data: JobPayloads[N], sendNow: SendNow | undefined) => Promise<string>;
};

/**
 * Thin shell: parse the job, call one service method. Errors propagate so BullMQ retries the advance (a retry never
 * sends twice: only a PREPARED operation is sent, by compare-and-set). With SEND_IN_ADVANCE the job sends a ready
 * operation itself, asking its own lock where a dispatch job would ask its own: the sweeper counts a locked advance
 * job as a live sender for every operation of its execution.
 */
@Injectable()
export class ExecutionsProcessor extends QueueWorker {
  private readonly handlers: Handlers;
  private readonly sendInAdvance: boolean;

  constructor(
    lifecycle: LifecycleService,
    private readonly sender: SenderService,
    @Inject(LOGGER) logger: Logger,
    @Inject(VERITY_CONFIG) config: VerityConfig,
  ) {
    super(QueueName.EXECUTIONS, config, logger);
    this.sendInAdvance = config.SEND_IN_ADVANCE;
    this.handlers = { [JobName.ADVANCE_EXECUTION]: (data, sendNow) => lifecycle.advance(data.executionId, sendNow) };
  }

  async process(job: Job, token?: string): Promise<string> {
    const handler = this.handlers[job.name as JobName.ADVANCE_EXECUTION];
    if (!handler) throw new Error(`no handler for job ${job.name} on ${QueueName.EXECUTIONS}`);
    const sendNow: SendNow | undefined = this.sendInAdvance
      ? async (operationId, held, thenExecution, executionFirst) => {
          const report = await this.sender.sendOperation(operationId, held, () => this.holdsLock(job, token), {
            advanceAfter: false,
            sender: 'advance-job',
            thenExecution,
            executionFirst,
          });
          // The same line a dispatch job writes: one per operation and send.
          this.logger.info({ operationId, outcome: report.outcome }, 'dispatch');
          return report;
        }
      : undefined;
    return handler(job.data as JobPayloads[JobName.ADVANCE_EXECUTION], sendNow);
  }
}
