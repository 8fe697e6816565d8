import { Processor, WorkerHost } from '@nestjs/bullmq';
import { BeforeApplicationShutdown, Inject, OnApplicationBootstrap } from '@nestjs/common';
import { LOGGER, Logger, loadConfig } from '@verity/platform';
import { JobName, JobPayloads, QueueName, closeWorker, watchWorker, workerSettings } from '@verity/queues';
import type { Job } from 'bullmq';
import { reconcileAttempts } from './metrics';
import { SweeperService } from './sweeper.service';
import { VerificationService } from './verification.service';
import { WebhooksService } from './webhooks.service';

const config = loadConfig();

@Processor(QueueName.VERIFY, workerSettings(QueueName.VERIFY, config))
export class VerifyProcessor extends WorkerHost implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly handlers: {
    [N in JobName.VERIFY_OPERATION | JobName.OBSERVE_OPERATION]: (data: JobPayloads[N]) => Promise<string>;
  };

  constructor(
    verification: VerificationService,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    super();
    this.handlers = {
      [JobName.VERIFY_OPERATION]: (data) => verification.verify(data.operationId),
      [JobName.OBSERVE_OPERATION]: (data) => verification.observe(data.operationId),
    };
  }

  onApplicationBootstrap(): void {
    watchWorker(this.worker, this.logger);
  }

  async beforeApplicationShutdown(): Promise<void> {
    await closeWorker(this.worker, this.logger);
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

@Processor(QueueName.RECONCILE, workerSettings(QueueName.RECONCILE, config))
export class ReconcileProcessor extends WorkerHost implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly handlers: {
    [N in JobName.RECONCILE_OPERATION | JobName.RECHECK_OPERATION]: (data: JobPayloads[N]) => Promise<string>;
  };

  constructor(
    verification: VerificationService,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    super();
    this.handlers = {
      [JobName.RECONCILE_OPERATION]: (data) => verification.reconcile(data.operationId),
      [JobName.RECHECK_OPERATION]: (data) => verification.recheck(data.operationId, data.requestedBy),
    };
  }

  onApplicationBootstrap(): void {
    watchWorker(this.worker, this.logger);
  }

  async beforeApplicationShutdown(): Promise<void> {
    await closeWorker(this.worker, this.logger);
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

@Processor(QueueName.SWEEP, workerSettings(QueueName.SWEEP, config))
export class SweepProcessor extends WorkerHost implements OnApplicationBootstrap, BeforeApplicationShutdown {
  constructor(
    private readonly sweeper: SweeperService,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    super();
  }

  async onApplicationBootstrap(): Promise<void> {
    watchWorker(this.worker, this.logger);
    // One scheduler entry however many reconcilers start: upsert is idempotent.
    await this.worker.waitUntilReady();
  }

  async beforeApplicationShutdown(): Promise<void> {
    await closeWorker(this.worker, this.logger);
  }

  async process(job: Job): Promise<string> {
    if (job.name !== JobName.SWEEP) throw new Error(`no handler for job ${job.name} on ${QueueName.SWEEP}`);
    return JSON.stringify(await this.sweeper.sweep());
  }
}

@Processor(QueueName.WEBHOOKS, workerSettings(QueueName.WEBHOOKS, config))
export class WebhooksProcessor extends WorkerHost implements OnApplicationBootstrap, BeforeApplicationShutdown {
  constructor(
    private readonly webhooks: WebhooksService,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    super();
  }

  onApplicationBootstrap(): void {
    watchWorker(this.worker, this.logger);
  }

  async beforeApplicationShutdown(): Promise<void> {
    await closeWorker(this.worker, this.logger);
  }

  async process(job: Job): Promise<string> {
    if (job.name !== JobName.DELIVER_WEBHOOK) {
      throw new Error(`no handler for job ${job.name} on ${QueueName.WEBHOOKS}`);
    }
    const data = job.data as JobPayloads[JobName.DELIVER_WEBHOOK];
    return this.webhooks.deliver(data.deliveryId, data.round, job.attemptsMade, job.opts.attempts ?? 1);
  }
}
