import { Inject, Injectable } from '@nestjs/common';
import { VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { JobName, webhookDeliveryJob } from './names';
import { JobProducer } from './producer';

/**
 * Webhook delivery rounds, as jobs: each retried as configured (WEBHOOK_MAX_ATTEMPTS, WEBHOOK_BACKOFF_MS), so an
 * admin's redelivery and the reconciler's outbox enqueue them alike.
 */
@Injectable()
export class WebhookDeliveryQueue {
  private readonly retry: { attempts: number; backoffMs: number };

  constructor(
    private readonly producer: JobProducer,
    @Inject(VERITY_CONFIG) config: VerityConfig,
  ) {
    this.retry = { attempts: config.WEBHOOK_MAX_ATTEMPTS, backoffMs: config.WEBHOOK_BACKOFF_MS };
  }

  /**
   * One round of one delivery, `backlog` its place in its tenant's line (webhookDeliveryJob). After the commit: a round
   * Redis did not take stays pending in Postgres, where the reconciler's outbox pass finds it again.
   */
  tryEnqueue(delivery: { id: string; round: number }, backlog: number): Promise<boolean> {
    const job = webhookDeliveryJob(delivery.id, delivery.round, this.retry, backlog);
    return this.producer.tryEnqueue(JobName.DELIVER_WEBHOOK, job.data, job.options);
  }

  /**
   * A round still owed (its delivery pending, untouched for a while): enqueued again unless its job is still waiting,
   * delayed or running. A job that ended without recording its attempt (it failed for good: the database refused the
   * record, or the process died between the send and the record) is kept by BullMQ for a day under the round's id and
   * would swallow a plain add, leaving the delivery pending that long: it is replaced.
   */
  tryEnqueueOrRearm(delivery: { id: string; round: number }, backlog: number): Promise<boolean> {
    const job = webhookDeliveryJob(delivery.id, delivery.round, this.retry, backlog);
    return this.producer.tryEnqueueOrRearm(JobName.DELIVER_WEBHOOK, job.data, job.options.jobId!, job.options);
  }
}
