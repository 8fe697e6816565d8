import { isIP } from 'node:net';
import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { TenantConnectors, checkTarget, platformRefusalOf } from '@verity/connectors';
import {
  SecretsCipher,
  WebhookDeliveryRow,
  WebhookEndpointRow,
  createWebhookEndpoint,
  deleteWebhookEndpoint,
  MAX_WEBHOOK_ENDPOINTS,
  enableWebhookEndpoint,
  findWebhookEndpoint,
  listWebhookDeliveries,
  listWebhookEndpoints,
  redeliverWebhook,
} from '@verity/persistence';
import { LOGGER, Logger, VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { JobName, JobProducer, webhookDeliveryJob } from '@verity/queues';
import { DataSource } from 'typeorm';
import type { z } from 'zod';
import type { Principal } from '../auth/principal';
import { Problem } from '../problem/problem';
import type { DeliveriesQuery, DeliveryView, WebhookInput, WebhookView } from './webhooks.schema';
import { pageOf } from '../http/parse';

const iso = (d: Date | null) => (d ? new Date(d).toISOString() : null);

function endpointView(row: WebhookEndpointRow): z.infer<typeof WebhookView> {
  return {
    id: row.id,
    url: row.url,
    events: row.events as z.infer<typeof WebhookView>['events'],
    disabled: row.disabled_at !== null,
    disabled_reason: row.disabled_reason,
    disabled_at: iso(row.disabled_at),
    consecutive_failures: row.consecutive_failures,
    created_at: new Date(row.created_at).toISOString(),
  };
}

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

/** A tenant's webhook endpoints (admin role): their URLs obey the tenant's http allowlist and the SSRF rules. */
@Injectable()
export class WebhooksService {
  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly cipher: SecretsCipher,
    private readonly producer: JobProducer,
    private readonly connectors: TenantConnectors,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  async list(principal: Principal) {
    return { data: (await listWebhookEndpoints(this.db.manager, principal.tenantId)).map(endpointView) };
  }

  async get(principal: Principal, id: string) {
    return endpointView(await this.endpoint(principal, id));
  }

  async create(principal: Principal, input: WebhookInput) {
    // The same check the http connector makes before every call; the delivery worker repeats it (and vets the
    // addresses the host resolves to) before every send.
    const target = checkTarget(
      input.url,
      await this.connectors.httpAllowlist(principal.tenantId),
      this.connectors.platform,
    );
    const refused = (message: string) =>
      Problem.validation([
        {
          field: 'url',
          rule: 'egress_blocked',
          message: `${message} (webhook targets obey the http connector's allowlist: PUT /v1/admin/connector-settings/http)`,
        },
      ]);
    if ('code' in target) throw refused(target.message);
    // Also the platform's own services by the address the URL names (also one configured by name). A name is judged by
    // what it resolves to at each delivery, as every call of the http connector is: no lookup here.
    const reserved = isIP(target.host) ? await platformRefusalOf(target) : null;
    if (reserved) throw refused(reserved);
    const created = await createWebhookEndpoint(this.db, this.cipher, {
      tenantId: principal.tenantId,
      url: input.url,
      events: input.events,
      createdBy: principal.keyId,
    });
    if (!created) {
      throw Problem.conflict(
        'webhook-limit',
        `this tenant already has ${MAX_WEBHOOK_ENDPOINTS} webhook endpoints; delete one first`,
      );
    }
    const { endpoint, secret } = created;
    this.logger.info(
      { tenantId: principal.tenantId, endpointId: endpoint.id, host: target.host, events: input.events },
      'webhook endpoint created',
    );
    return { ...endpointView(endpoint), secret };
  }

  async remove(principal: Principal, id: string): Promise<void> {
    if (!(await deleteWebhookEndpoint(this.db.manager, { tenantId: principal.tenantId, id, by: principal.keyId })))
      throw Problem.notFound('Webhook', id);
    this.logger.info({ tenantId: principal.tenantId, endpointId: id }, 'webhook endpoint deleted');
  }

  async enable(principal: Principal, id: string) {
    const endpoint = await enableWebhookEndpoint(this.db.manager, {
      tenantId: principal.tenantId,
      id,
      by: principal.keyId,
    });
    if (!endpoint) throw Problem.notFound('Webhook', id);
    this.logger.info({ tenantId: principal.tenantId, endpointId: id }, 'webhook endpoint enabled');
    return endpointView(endpoint);
  }

  async deliveries(principal: Principal, id: string, query: z.infer<typeof DeliveriesQuery>) {
    await this.endpoint(principal, id);
    const found = await listWebhookDeliveries(this.db.manager, {
      tenantId: principal.tenantId,
      endpointId: id,
      before: query.cursor,
      limit: query.limit + 1,
    });
    const { page, nextCursor } = pageOf(found, query.limit);
    return { data: page.map(deliveryView), next_cursor: nextCursor };
  }

  async redeliver(principal: Principal, id: string, deliveryId: string) {
    const result = await redeliverWebhook(this.db.manager, {
      tenantId: principal.tenantId,
      endpointId: id,
      deliveryId,
    });
    if ('refused' in result) {
      if (result.refused === 'not_found') throw Problem.notFound('Delivery', deliveryId);
      throw Problem.conflict('endpoint-disabled', `webhook ${id} is disabled; enable it first (POST …/enable)`);
    }
    // An admin's redelivery is one delivery asked for now: first in its tenant's line.
    const job = webhookDeliveryJob(
      result.delivery.id,
      result.delivery.round,
      { attempts: this.config.WEBHOOK_MAX_ATTEMPTS, backoffMs: this.config.WEBHOOK_BACKOFF_MS },
      1,
    );
    // After the commit; if Redis is away, the reconciler's outbox pass enqueues the pending delivery later.
    await this.producer.tryEnqueue(JobName.DELIVER_WEBHOOK, job.data, job.options);
    this.logger.info({ tenantId: principal.tenantId, endpointId: id, deliveryId }, 'webhook redelivery requested');
    return deliveryView(result.delivery);
  }

  private async endpoint(principal: Principal, id: string): Promise<WebhookEndpointRow> {
    const endpoint = await findWebhookEndpoint(this.db.manager, principal.tenantId, id);
    if (!endpoint) throw Problem.notFound('Webhook', id);
    return endpoint;
  }
}
