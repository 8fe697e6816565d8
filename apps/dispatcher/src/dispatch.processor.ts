import { Inject, Injectable } from '@nestjs/common';
import { LOGGER, Logger, VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { JobName, JobPayloads, QueueName, QueueWorker } from '@verity/queues';
import { Job, UnrecoverableError } from 'bullmq';
import { SenderService } from './sender.service';

type Handlers = {
  [N in JobName.DISPATCH_OPERATION]: (
    data: JobPayloads[N],
    stillOwned: () => Promise<boolean | null>,
  ) => Promise<string>;
};

/**
 * One send per job, attempts 1 and maxStalledCount 0: BullMQ never re-runs a send. A failure here is final for
 * the job; the operation's fate is decided by the CAS rows, the sweeper and the reconciler.
 */
@Injectable()
export class DispatchProcessor extends QueueWorker {
  private readonly handlers: Handlers;

  constructor(
    private readonly sender: SenderService,
    @Inject(LOGGER) logger: Logger,
    @Inject(VERITY_CONFIG) config: VerityConfig,
  ) {
    super(QueueName.DISPATCH, config, logger);
    this.handlers = {
      [JobName.DISPATCH_OPERATION]: (data, stillOwned) => sender.dispatch(data.operationId, stillOwned),
    };
  }

  async process(job: Job, token?: string): Promise<string> {
    const handler = this.handlers[job.name as JobName.DISPATCH_OPERATION];
    if (!handler) throw new UnrecoverableError(`no handler for job ${job.name} on ${QueueName.DISPATCH}`);
    const data = job.data as JobPayloads[JobName.DISPATCH_OPERATION];
    const { operationId } = data;
    try {
      const outcome = await handler(data, () => this.holdsLock(job, token));
      // One line per operation and send: what an operator follows in the log ("sent", "skipped: …", "unknown: …").
      this.logger.info({ operationId, outcome }, 'dispatch');
      return outcome;
    } catch (error) {
      throw new UnrecoverableError(`dispatch failed: ${(error as Error).message}`);
    }
  }
}
