import { Inject, Injectable } from '@nestjs/common';
import { LOGGER, Logger, VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { JobName, JobPayloads, QueueName, QueueWorker } from '@verity/queues';
import type { Job } from 'bullmq';
import { reconcileAttempts } from './metrics';
import { SweeperService } from './sweeper.service';
import { VerificationService } from './verification.service';
import { WebhooksService } from './webhooks.service';

@Injectable()
export class VerifyProcessor extends QueueWorker {
  private readonly handlers: {
    [N in JobName.VERIFY_OPERATION | JobName.OBSERVE_OPERATION]: (data: JobPayloads[N]) => Promise<string>;
  };

  constructor(
    verification: VerificationService,
    @Inject(LOGGER) logger: Logger,
    @Inject(VERITY_CONFIG) config: VerityConfig,
  ) {
    super(QueueName.VERIFY, config, logger);
    this.handlers = {
      [JobName.VERIFY_OPERATION]: (data) => verification.verify(data.operationId),
      [JobName.OBSERVE_OPERATION]: (data) => verification.observe(data.operationId),
    };
  }

  async process(job: Job): Promise<string> {
    const handler = this.handlers[job.name as JobName.VERIFY_OPERATION | JobName.OBSERVE_OPERATION];
    if (!handler) throw new Error(`no handler for job ${job.name} on ${QueueName.VERIFY}`);
    const data = job.data as JobPayloads[JobName.VERIFY_OPERATION];
    const outcome = await handler(data);
    // Verification moves an operation (info); a repeated observation that found nothing new does not (debug).
    const level = outcome === 'observed: unchanged' || outcome.startsWith('skipped') ? 'debug' : 'info';
    this.logger[level]({ operationId: data.operationId, job: job.name, outcome }, 'verify');
    return outcome;
  }
}

@Injectable()
export class ReconcileProcessor extends QueueWorker {
  private readonly handlers: {
    [N in JobName.RECONCILE_OPERATION | JobName.RECHECK_OPERATION]: (data: JobPayloads[N]) => Promise<string>;
  };

  constructor(
    verification: VerificationService,
    @Inject(LOGGER) logger: Logger,
    @Inject(VERITY_CONFIG) config: VerityConfig,
  ) {
    super(QueueName.RECONCILE, config, logger);
    this.handlers = {
      [JobName.RECONCILE_OPERATION]: (data) => verification.reconcile(data.operationId),
      [JobName.RECHECK_OPERATION]: (data) => verification.recheck(data.operationId, data.requestedBy),
    };
  }

  async process(job: Job): Promise<string> {
    const handler = this.handlers[job.name as JobName.RECONCILE_OPERATION | JobName.RECHECK_OPERATION];
    if (!handler) throw new Error(`no handler for job ${job.name} on ${QueueName.RECONCILE}`);
    const data = job.data as JobPayloads[JobName.RECHECK_OPERATION];
    let outcome: string;
    try {
      outcome = await handler(data);
    } catch (error) {
      reconcileAttempts.inc({ job: job.name, outcome: 'error' });
      throw error;
    }
    // Outcomes are a closed set of phrases (VerifyOutcome, RecheckOutcome): fit for a label.
    reconcileAttempts.inc({ job: job.name, outcome });
    this.logger.info({ operationId: data.operationId, job: job.name, outcome }, 'reconcile');
    return outcome;
  }
}

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

  async process(job: Job): Promise<string> {
    if (job.name !== JobName.DELIVER_WEBHOOK) {
      throw new Error(`no handler for job ${job.name} on ${QueueName.WEBHOOKS}`);
    }
    const data = job.data as JobPayloads[JobName.DELIVER_WEBHOOK];
    return this.webhooks.deliver(data.deliveryId, data.round, job.attemptsMade, job.opts.attempts ?? 1);
  }
}
