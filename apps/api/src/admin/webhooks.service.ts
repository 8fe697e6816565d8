import { isIP } from 'node:net';
import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { TenantConnectors, checkTarget, platformRefusalOf } from '@verity/connectors';
import {
  SecretsCipher,
  WebhookEndpointRow,
  createWebhookEndpoint,
  createWebhookEndpointWithKey,
  findWebhookEndpointWithSecret,
  SecretUnreadableError,
  webhookKeyHolder,
  deleteWebhookEndpoint,
  MAX_WEBHOOK_ENDPOINTS,
  enableWebhookEndpoint,
  findWebhookEndpoint,
  listWebhookEndpoints,
  waitForWebhookSends,
} from '@verity/persistence';
import { LOGGER, Logger, VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { DataSource, EntityManager } from 'typeorm';
import type { z } from 'zod';
import type { Principal } from '../auth/principal';
import { sentBodyHash } from '../executions/idempotency';
import { iso } from '../executions/presenter';
import { refuseSecretValuesIn } from '../http/secret-values';
import { Problem } from '../problem/problem';
import type { WebhookCreatedView, WebhookInput, WebhookView } from './webhooks.schema';

type WebhookCreated = z.infer<typeof WebhookCreatedView>;

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

/**
 * The hash an Idempotency-Key's record keeps of a create. `events` is a set (the schema refuses a type named twice, and
 * an endpoint is sent the same events whatever the order they were listed in): hashed sorted, so that a retry listing
 * them in another order is recognised as the same request and replayed, not refused 422 as another body.
 */
function webhookRequestHash(input: WebhookInput): string {
  return sentBodyHash({ ...input, events: [...new Set(input.events)].sort() });
}

/** A tenant's webhook endpoints (admin role): their URLs obey the tenant's http allowlist and the SSRF rules. */
@Injectable()
export class WebhooksService {
  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly cipher: SecretsCipher,
    private readonly connectors: TenantConnectors,
    @Inject(LOGGER) private readonly logger: Logger,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
  ) {}

  async list(principal: Principal) {
    return { data: (await listWebhookEndpoints(this.db.manager, principal.tenantId)).map(endpointView) };
  }

  async get(principal: Principal, id: string) {
    return endpointView(await tenantEndpoint(this.db.manager, principal, id));
  }

  /**
   * With an Idempotency-Key: the same key and body answer what the first request created (the endpoint as it is now,
   * with its signing secret: the replay is the answer a client lost), 422 for another body, 409 while the first is
   * still being created, 409 `idempotency-key-target-deleted` once that endpoint was deleted (its secret went with
   * it; a new endpoint would be another request), and 409 `idempotency-replay-unavailable` when its secret no longer
   * opens (SECRETS_KEY changed since the create).
   */
  async create(
    principal: Principal,
    input: WebhookInput,
    idempotencyKey?: string,
  ): Promise<{ endpoint: WebhookCreated; replayed: boolean }> {
    const idempotency =
      idempotencyKey === undefined
        ? null
        : { key: idempotencyKey, requestHash: webhookRequestHash(input), ttlMs: this.config.IDEMPOTENCY_TTL_MS };
    let host: string;
    try {
      host = await this.vetTarget(principal, input);
    } catch (error) {
      // The checks judge the URL by the tenant's settings as they are now: a key that already holds an endpoint is
      // answered first (its replay, 422 or 409), as for an execution — a 400 would say "nothing was written" about a
      // request that created an endpoint before the admin changed the allowlist.
      const held = idempotency && error instanceof Problem ? await this.heldKeyAnswer(principal, idempotency) : null;
      if (held) return held;
      throw error;
    }
    const newEndpoint = {
      tenantId: principal.tenantId,
      url: input.url,
      events: input.events,
      createdBy: principal.keyId,
    };
    const created = idempotency
      ? await createWebhookEndpointWithKey(this.db, this.cipher, newEndpoint, idempotency)
      : await createWebhookEndpoint(this.db, this.cipher, newEndpoint);
    if (created === 'busy') throw Problem.idempotencyKeyInFlight();
    if (!created) {
      // Nothing written: another record holds the key, or the tenant is at its limit.
      const held = idempotency ? await this.heldKeyAnswer(principal, idempotency) : null;
      if (held) return held;
      throw Problem.conflict(
        'webhook-limit',
        `this tenant already has ${MAX_WEBHOOK_ENDPOINTS} webhook endpoints; delete one first`,
      );
    }
    const { endpoint, secret } = created;
    this.logger.info(
      { tenantId: principal.tenantId, endpointId: endpoint.id, host, events: input.events },
      'webhook endpoint created',
    );
    return { endpoint: { ...endpointView(endpoint), secret }, replayed: false };
  }

  /** The answer for a key another request's record holds; null when none does. */
  private async heldKeyAnswer(
    principal: Principal,
    idempotency: { key: string; requestHash: string },
  ): Promise<{ endpoint: WebhookCreated; replayed: true } | null> {
    const holder = await webhookKeyHolder(
      this.db.manager,
      principal.tenantId,
      idempotency.key,
      idempotency.requestHash,
    );
    if (!holder) return null;
    if (holder.kind === 'mismatch') throw Problem.idempotencyKeyReused();
    let replay: Awaited<ReturnType<typeof findWebhookEndpointWithSecret>>;
    try {
      replay = await findWebhookEndpointWithSecret(this.db.manager, this.cipher, principal.tenantId, holder.endpointId);
    } catch (error) {
      if (!(error instanceof SecretUnreadableError)) throw error;
      // The answer would be the endpoint without the one thing the client lost: say so rather than replay half of it.
      // Not a 500: nothing failed, the replay cannot be given (SECRETS_KEY changed since the create) — the admin can
      // still delete the endpoint and create another, or restore the key it was sealed with.
      throw Problem.conflict(
        'idempotency-replay-unavailable',
        `the signing secret of the webhook endpoint ${holder.endpointId} this Idempotency-Key created cannot be shown again: it does not open with this SECRETS_KEY (not the key it was sealed with); set that key to replay the answer, or delete the endpoint and create another with a new key`,
        { webhook_id: holder.endpointId },
      );
    }
    if (!replay) {
      throw Problem.conflict(
        'idempotency-key-target-deleted',
        `the webhook endpoint ${holder.endpointId} this Idempotency-Key created has been deleted since; use a new key to create another`,
        { webhook_id: holder.endpointId },
      );
    }
    return { endpoint: { ...endpointView(replay.endpoint), secret: replay.secret }, replayed: true };
  }

  /** 400 unless the URL may be a webhook target of the tenant; the host it names otherwise. */
  private async vetTarget(principal: Principal, input: WebhookInput): Promise<string> {
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
    return target.host;
  }

  async remove(principal: Principal, id: string): Promise<void> {
    const deleted = await deleteWebhookEndpoint(this.db.manager, {
      tenantId: principal.tenantId,
      id,
      by: principal.keyId,
    });
    // A message already on its way (signed before the delete committed) reaches the receiver before the answer, or
    // never: the answer waits until every send to the endpoint marked in flight has ended, at most
    // webhookSendInFlightMs (WEBHOOK_TIMEOUT_MS and a second). So does the 404 of a delete that finds the endpoint gone
    // (another delete of it committed first and may still be waiting): it says as much as the 204 — nothing more
    // arrives. Only the tenant's own sends of that id: another tenant's endpoint is never waited on, nor revealed by
    // the time the answer takes.
    await waitForWebhookSends(this.db.manager, id, {
      ofTenant: deleted ? undefined : principal.tenantId,
      onWaiting: deleted
        ? undefined
        : () =>
            this.logger.info(
              { tenantId: principal.tenantId, endpointId: id },
              'webhook endpoint gone: waiting for its sends under way before answering 404',
            ),
    });
    if (!deleted) throw Problem.notFound('Webhook', id);
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
