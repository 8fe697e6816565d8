import { Delete, Get, HttpCode, Param, Post, Query, Req, Res } from '@nestjs/common';
import { ApiHeader } from '@nestjs/swagger';
import type { Request, Response } from 'express';
import { z } from 'zod';
import { findWebhookEndpoint, webhookDeliveryExists } from '@verity/persistence';
import type { DataSource } from 'typeorm';
import { CurrentPrincipal, Principal } from '../auth/principal';
import { ActsOn } from '../http/if-match';
import { JsonBody, idempotencyKeyOf, parseQuery } from '../http/parse';
import { ApiEndpoint, ApiPageQuery } from '../openapi';
import { AdminController } from './admin-controller';
import {
  DeliveriesQuery,
  DeliveryView,
  WebhookCreatedView,
  WebhookInput,
  WebhookInputSchema,
  WebhookView,
} from './webhooks.schema';
import { WebhookDeliveriesService } from './webhook-deliveries.service';
import { WebhooksService } from './webhooks.service';

const ID = { name: 'id', description: 'webhook endpoint id (whk_…)' };

/**
 * The tenant's webhook endpoints (admin role). Deliveries are signed per Standard Webhooks with the endpoint's secret,
 * which is shown once, when the endpoint is created.
 */
/** The endpoint a write's path names (`:id`) is the tenant's (ActsOn). */
async function endpointExists(db: DataSource, principal: Principal, params: Record<string, string>) {
  return (await findWebhookEndpoint(db.manager, principal.tenantId, params.id)) !== null;
}

@AdminController('webhooks')
export class WebhooksController {
  constructor(
    private readonly webhooks: WebhooksService,
    private readonly deliveryLog: WebhookDeliveriesService,
  ) {}

  @Get()
  @ApiEndpoint({
    id: 'listWebhooks',
    summary: 'This tenant’s webhook endpoints (secrets are never returned)',
    response: { schema: z.object({ data: z.array(WebhookView) }) },
  })
  list(@CurrentPrincipal() principal: Principal) {
    return this.webhooks.list(principal);
  }

  @Post()
  @ApiEndpoint({
    id: 'createWebhook',
    summary: 'Create a webhook endpoint',
    description:
      'The URL must pass the tenant’s http connector allowlist and the SSRF rules (400 `egress_blocked` otherwise). ' +
      'The answer carries the signing secret (`whsec_…`), shown this once, and `Cache-Control: no-store`. At most 20 ' +
      'endpoints per tenant (409 `webhook-limit`). With an Idempotency-Key, the same key and body return the same ' +
      'endpoint and secret with `Idempotent-Replayed: true` (a retry after a lost answer); 409 ' +
      '`idempotency-key-target-deleted` once that endpoint was deleted; 409 `idempotency-replay-unavailable` when its ' +
      'signing secret no longer opens (SECRETS_KEY changed since the create).',
    body: { schema: WebhookInputSchema },
    response: {
      status: 201,
      schema: WebhookCreatedView,
      headers: {
        Location: { description: 'the new endpoint’s URL', required: true, schema: { type: 'string' } },
        'Cache-Control': {
          description: '`no-store`: the answer carries the signing secret',
          required: true,
          schema: { type: 'string' },
        },
        'Idempotent-Replayed': {
          description: '`true` when this is a replay of an earlier request',
          schema: { type: 'string' },
        },
      },
    },
    problems: [
      'validation-error',
      'webhook-limit',
      'idempotency-key-in-flight',
      'idempotency-key-reused',
      'idempotency-key-target-deleted',
      'idempotency-replay-unavailable',
    ],
  })
  @ApiHeader({
    name: 'Idempotency-Key',
    required: false,
    description: '1–255 printable ASCII characters; scoped to the tenant and this route, kept 24 h',
  })
  async create(
    @CurrentPrincipal() principal: Principal,
    @Req() req: Request,
    @JsonBody(WebhookInputSchema) input: WebhookInput,
    @Res({ passthrough: true }) res: Response,
  ) {
    const { endpoint, replayed } = await this.webhooks.create(principal, input, idempotencyKeyOf(req));
    // A 201 without Location names the target URI as what it created (RFC 9110): the list, not the endpoint.
    res.setHeader('location', `/v1/admin/webhooks/${endpoint.id}`);
    // The signing secret, shown to this request (and its retries): no browser or proxy cache may keep a copy of it.
    res.setHeader('cache-control', 'no-store');
    if (replayed) res.setHeader('idempotent-replayed', 'true');
    return endpoint;
  }

  @Get(':id')
  @ApiEndpoint({
    id: 'getWebhook',
    summary: 'One webhook endpoint, with `disabled` and its reason',
    params: [ID],
    response: { schema: WebhookView },
  })
  get(@CurrentPrincipal() principal: Principal, @Param('id') id: string) {
    return this.webhooks.get(principal, id);
  }

  @Delete(':id')
  @HttpCode(204)
  @ApiEndpoint({
    id: 'deleteWebhook',
    summary: 'Delete a webhook endpoint and its delivery log',
    description:
      'Nothing is signed with its secret afterwards. A message already on its way to the endpoint is waited for: the ' +
      '204 comes once its request has ended (answered, failed or cut off at WEBHOOK_TIMEOUT_MS), so it may take up to ' +
      'WEBHOOK_TIMEOUT_MS and a second.',
    params: [ID],
    response: { status: 204, description: 'Deleted' },
  })
  @ActsOn(endpointExists)
  async remove(@CurrentPrincipal() principal: Principal, @Param('id') id: string) {
    await this.webhooks.remove(principal, id);
  }

  @Post(':id/enable')
  @HttpCode(200)
  @ApiEndpoint({
    id: 'enableWebhook',
    summary: 'Re-enable an endpoint disabled after repeated failures',
    description: 'Clears the failure count. Events from now on are delivered; those while it was disabled are not.',
    params: [ID],
    response: { schema: WebhookView },
  })
  @ActsOn(endpointExists)
  enable(@CurrentPrincipal() principal: Principal, @Param('id') id: string) {
    return this.webhooks.enable(principal, id);
  }

  @Get(':id/deliveries')
  @ApiEndpoint({
    id: 'listWebhookDeliveries',
    summary: 'The endpoint’s delivery log, newest first, cursor pagination',
    description:
      'A page holds at most `limit` deliveries, and fewer once those in it (their messages) hold 1 MiB of stored ' +
      'text (one at least): `next_cursor` is then set. Read on until it is null.',
    params: [ID],
    response: { schema: z.object({ data: z.array(DeliveryView), next_cursor: z.string().nullable() }) },
    problems: ['validation-error'],
  })
  @ApiPageQuery()
  deliveries(@CurrentPrincipal() principal: Principal, @Param('id') id: string, @Query() query: unknown) {
    return this.deliveryLog.list(principal, id, parseQuery(DeliveriesQuery, query));
  }

  @Post(':id/deliveries/:delivery_id/redeliver')
  @HttpCode(202)
  @ApiEndpoint({
    id: 'redeliverWebhook',
    summary: 'Send one message again (same webhook-id, a new round of attempts)',
    description:
      '409 `endpoint-disabled` while the endpoint is disabled; 409 `delivery-pending` (with Retry-After) while the ' +
      'message is still being sent (pending): of several redeliveries at once, one is accepted.',
    params: [ID, { name: 'delivery_id', description: 'delivery id (msg_…), the webhook-id receivers saw' }],
    response: { status: 202, schema: DeliveryView },
    problems: ['endpoint-disabled', 'delivery-pending'],
  })
  @ActsOn((db, principal, params) =>
    webhookDeliveryExists(db.manager, {
      tenantId: principal.tenantId,
      endpointId: params.id,
      deliveryId: params.delivery_id,
      by: principal.keyId,
    }),
  )
  redeliver(
    @CurrentPrincipal() principal: Principal,
    @Param('id') id: string,
    @Param('delivery_id') deliveryId: string,
  ) {
    return this.deliveryLog.redeliver(principal, id, deliveryId);
  }
}
