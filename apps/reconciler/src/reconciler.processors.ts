import { Inject, Injectable } from '@nestjs/common';
import { LOGGER, Logger, VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { JobName, JobPayloads, OperationJob, QueueName, QueueWorker } from '@verity/queues';
import { DelayedError, Job } from 'bullmq';
import { reconcileAttempts } from './metrics';
import { SweeperService } from './sweeper.service';
import { VerificationService } from './verification.service';
import { WebhooksService } from './webhooks.service';

/** The jobs of the verify and reconcile queues: each names one operation, and verification carries it out. */
type OperationJobName =
  JobName.VERIFY_OPERATION | JobName.OBSERVE_OPERATION | JobName.RECONCILE_OPERATION | JobName.RECHECK_OPERATION;

interface OperationJobsQueue<N extends OperationJobName> {
  queue: QueueName;
  handlers: (verification: VerificationService) => { [K in N]: (data: JobPayloads[K]) => Promise<string> };
  /** How the queue counts and logs a job's outcome (`outcome` still pending: a failure is the queue's to count). */
  report(logger: Logger, job: Job, data: OperationJob, outcome: Promise<string>): Promise<string>;
}

/** The worker of one queue of operation jobs: a handler per job name; the queue says how an outcome is reported. */
function operationJobsWorker<N extends OperationJobName>(spec: OperationJobsQueue<N>) {
  @Injectable()
  class OperationJobsWorker extends QueueWorker {
    private readonly handlers: { [K in N]: (data: JobPayloads[K]) => Promise<string> };

    constructor(
      verification: VerificationService,
      @Inject(LOGGER) logger: Logger,
      @Inject(VERITY_CONFIG) config: VerityConfig,
    ) {
      super(spec.queue, config, logger);
      this.handlers = spec.handlers(verification);
    }

    async process(job: Job): Promise<string> {
      const handler = this.handlers[job.name as N] as ((data: OperationJob) => Promise<string>) | undefined;
      if (!handler) throw new Error(`no handler for job ${job.name} on ${spec.queue}`);
      const data = job.data as OperationJob;
      return spec.report(this.logger, job, data, handler(data));
    }
  }
  return OperationJobsWorker;
}

export const VerifyProcessor = operationJobsWorker<JobName.VERIFY_OPERATION | JobName.OBSERVE_OPERATION>({
  queue: QueueName.VERIFY,
  handlers: (verification) => ({
    [JobName.VERIFY_OPERATION]: (data) => verification.verify(data.operationId),
    [JobName.OBSERVE_OPERATION]: (data) => verification.observe(data.operationId),
  }),
  async report(logger, job, data, pending) {
    const outcome = await pending;
    // Verification moves an operation (info); a repeated observation that found nothing new does not (debug).
    const level = outcome === 'observed: unchanged' || outcome.startsWith('skipped') ? 'debug' : 'info';
    logger[level]({ operationId: data.operationId, job: job.name, outcome }, 'verify');
    return outcome;
  },
});

export const ReconcileProcessor = operationJobsWorker<JobName.RECONCILE_OPERATION | JobName.RECHECK_OPERATION>({
  queue: QueueName.RECONCILE,
  handlers: (verification) => ({
    [JobName.RECONCILE_OPERATION]: (data) => verification.reconcile(data.operationId),
    [JobName.RECHECK_OPERATION]: (data) => verification.recheck(data.operationId, data.requestId, data.dueAt),
  }),
  async report(logger, job, data, pending) {
    let outcome: string;
    try {
      outcome = await pending;
    } catch (error) {
      reconcileAttempts.inc({ job: job.name, outcome: 'error' });
      throw error;
    }
    // Outcomes are a closed set of phrases (VerifyOutcome, RecheckOutcome): fit for a label.
    reconcileAttempts.inc({ job: job.name, outcome });
    logger.info({ operationId: data.operationId, job: job.name, outcome }, 'reconcile');
    return outcome;
  },
});

@Injectable()
export class SweepProcessor extends QueueWorker {
  constructor(
    private readonly sweeper: SweeperService,
    @Inject(LOGGER) logger: Logger,
    @Inject(VERITY_CONFIG) config: VerityConfig,
  ) {
    super(QueueName.SWEEP, config, logger);
  }

  override async onApplicationBootstrap(): Promise<void> {
    super.onApplicationBootstrap();
    // One scheduler entry however many reconcilers start: upsert is idempotent.
    await this.ready();
  }

  async process(job: Job): Promise<string> {
    if (job.name !== JobName.SWEEP) throw new Error(`no handler for job ${job.name} on ${QueueName.SWEEP}`);
    return JSON.stringify(await this.sweeper.sweep());
  }
}

@Injectable()
export class WebhooksProcessor extends QueueWorker {
  constructor(
    private readonly webhooks: WebhooksService,
    @Inject(LOGGER) logger: Logger,
    @Inject(VERITY_CONFIG) config: VerityConfig,
  ) {
    super(QueueName.WEBHOOKS, config, logger);
  }

  async process(job: Job, token?: string): Promise<string> {
    if (job.name !== JobName.DELIVER_WEBHOOK) {
      throw new Error(`no handler for job ${job.name} on ${QueueName.WEBHOOKS}`);
    }
    const data = job.data as JobPayloads[JobName.DELIVER_WEBHOOK];
    const result = await this.webhooks.deliver(data.deliveryId, data.round, job.attemptsMade, job.opts.attempts ?? 1);
    if (typeof result === 'string') return result;
    // Its tenant holds its share of this process's slots: the job waits, no attempt spent, until one of them frees.
    await job.moveToDelayed(result.wakeAt, token);
    const deferredAfter = job.attemptsMade;
    result.wakeWhenFree(() => this.wakeDeferred(job, deferredAfter));
    throw new DelayedError();
  }

  /**
   * Brings a deferred delivery back, only while it still waits for a slot: a wake stays on file after the job came back
   * by its own `wakeAt`, and the job may since have been tried and be waiting for a retry's backoff — which a promote
   * would cut short (the receiver called again at once, the attempts spent in seconds). Tried since: its attempts grew.
   */
  private async wakeDeferred(job: Job, deferredAfter: number): Promise<void> {
    const worker = this.workers.find((w) => w.qualifiedName === job.queueQualifiedName);
    const now = worker && job.id ? await Job.fromId(worker, job.id) : undefined;
    if (!now || now.attemptsMade !== deferredAfter) throw new Error('no longer waiting for a delivery slot');
    await now.promote();
  }
}
