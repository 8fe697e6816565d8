import { isIP } from 'node:net';
import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { TenantConnectors, checkTarget, platformRefusalOf } from '@verity/connectors';
import {
  SecretsCipher,
  WebhookEndpointRow,
  createWebhookEndpoint,
  deleteWebhookEndpoint,
  MAX_WEBHOOK_ENDPOINTS,
  enableWebhookEndpoint,
  findWebhookEndpoint,
  listWebhookEndpoints,
} from '@verity/persistence';
import { LOGGER, Logger } from '@verity/platform';
import { DataSource, EntityManager } from 'typeorm';
import type { z } from 'zod';
import type { Principal } from '../auth/principal';
import { iso } from '../executions/presenter';
import { refuseSecretValuesIn } from '../http/secret-values';
import { Problem } from '../problem/problem';
import type { WebhookInput, WebhookView } from './webhooks.schema';

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

/** A tenant's webhook endpoints (admin role): their URLs obey the tenant's http allowlist and the SSRF rules. */
@Injectable()
export class WebhooksService {
  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly cipher: SecretsCipher,
    private readonly connectors: TenantConnectors,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  async list(principal: Principal) {
    return { data: (await listWebhookEndpoints(this.db.manager, principal.tenantId)).map(endpointView) };
  }

  async get(principal: Principal, id: string) {
    return endpointView(await tenantEndpoint(this.db.manager, principal, id));
  }

  async create(principal: Principal, input: WebhookInput) {
    // A secret's value in the URL (a receiver's token that is also a connector secret) would be stored, shown by every
    // GET of the endpoints and sent to a host its allowlist entry need not bind: refused, as in any other text.
    await refuseSecretValuesIn(this.connectors, principal.tenantId, [['url', input.url]]);
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
}

/** The tenant's webhook endpoint of this id, or 404. */
export async function tenantEndpoint(db: EntityManager, principal: Principal, id: string): Promise<WebhookEndpointRow> {
  const endpoint = await findWebhookEndpoint(db, principal.tenantId, id);
  if (!endpoint) throw Problem.notFound('Webhook', id);
  return endpoint;
}
