import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { WebhookDeliveryRow, listWebhookDeliveriesPage, redeliverWebhook } from '@verity/persistence';
import { LOGGER, Logger, VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { WebhookDeliveryQueue } from '@verity/queues';
import { DataSource } from 'typeorm';
import type { z } from 'zod';
import type { Principal } from '../auth/principal';
import { iso } from '../executions/presenter';
import { PAGE_BYTES } from '../http/parse';
import { Problem } from '../problem/problem';
import type { DeliveriesQuery, DeliveryView } from './webhooks.schema';
import { tenantEndpoint } from './webhooks.service';

function deliveryView(row: WebhookDeliveryRow): z.infer<typeof DeliveryView> {
  return {
    id: row.id,
    type: row.type as z.infer<typeof DeliveryView>['type'],
    event_id: row.event_id,
    status: row.status,
    attempts: row.attempts,
    redeliveries: row.round,
    last_attempt_at: iso(row.last_attempt_at),
    last_response_status: row.last_response_status,
    last_error: row.last_error,
    delivered_at: iso(row.delivered_at),
    created_at: new Date(row.created_at).toISOString(),
    payload: row.payload,
  };
}

/** The delivery log of a tenant's webhook endpoint (admin role), and a message sent again on request. */
@Injectable()
export class WebhookDeliveriesService {
  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly queue: WebhookDeliveryQueue,
    @Inject(LOGGER) private readonly logger: Logger,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
  ) {}

  async list(principal: Principal, id: string, query: z.infer<typeof DeliveriesQuery>) {
    await tenantEndpoint(this.db.manager, principal, id);
    const { rows: page, more } = await listWebhookDeliveriesPage(
      this.db.manager,
      { tenantId: principal.tenantId, endpointId: id, before: query.cursor, limit: query.limit },
      PAGE_BYTES,
    );
    return { data: page.map(deliveryView), next_cursor: more ? page[page.length - 1].id : null };
  }

  async redeliver(principal: Principal, id: string, deliveryId: string) {
    const result = await redeliverWebhook(this.db.manager, {
      tenantId: principal.tenantId,
      endpointId: id,
      deliveryId,
      by: principal.keyId,
    });
    if ('refused' in result) {
      if (result.refused === 'webhook_not_found') throw Problem.notFound('Webhook', id);
      if (result.refused === 'delivery_not_found') throw Problem.notFound('Delivery', deliveryId);
      // The key was revoked while this request was under way (the statement checks it): nothing was written.
      if (result.refused === 'key_revoked') throw Problem.keyRevokedMidRequest();
      if (result.refused === 'pending') {
        // Retry-After: by then an attempt in flight has ended (its timeout, and a second for the lookup and the
        // connect, as the delivery worker counts it): the round has settled, or its next try shows in the log.
        throw new Problem(
          409,
          'delivery-pending',
          'Conflict with the current state',
          `delivery ${deliveryId} is still being sent (redelivery ${result.round}, not settled); ` +
            'redeliver it once it has settled (delivered, failed or skipped)',
          {},
          { 'retry-after': String(Math.ceil((this.config.WEBHOOK_TIMEOUT_MS + 1_000) / 1000)) },
        );
      }
      throw Problem.conflict('endpoint-disabled', `webhook ${id} is disabled; enable it first (POST …/enable)`);
    }
    // An admin's redelivery is asked for now: ahead of the tenant's outbox line, behind its other redeliveries still
    // waiting (so many at once are not all first, before another tenant's first). After the commit; if Redis is away,
    // the reconciler's outbox pass enqueues the pending delivery later.
    await this.queue.tryEnqueue(result.delivery, result.backlog);
    this.logger.info({ tenantId: principal.tenantId, endpointId: id, deliveryId }, 'webhook redelivery requested');
    return deliveryView(result.delivery);
  }
}
