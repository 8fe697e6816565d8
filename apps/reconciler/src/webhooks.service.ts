import { randomUUID } from 'node:crypto';
import { isIP } from 'node:net';
import { BeforeApplicationShutdown, Inject, Injectable, OnApplicationBootstrap } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { Redact, TenantConnectors, checkTarget, httpExchange, lookupFor, platformRefusalOf } from '@verity/connectors';
import {
  AttemptOutcome,
  DeliveryToSend,
  ENDPOINT_DISABLED_SKIP,
  OwedDelivery,
  SecretUnreadableError,
  SecretsCipher,
  clearWebhookSend,
  loadDeliveryToSend,
  markWebhookSending,
  owedWebhookDeliveries,
  recordWebhookAttempt,
  scanWebhookOutbox,
  skipWebhookDelivery,
} from '@verity/persistence';
import {
  BackgroundWork,
  LOGGER,
  Logger,
  OutageLog,
  VERITY_CONFIG,
  VerityConfig,
  webhookSendInFlightMs,
} from '@verity/platform';
import { WebhookDeliveryQueue } from '@verity/queues';
import { Webhook } from 'standardwebhooks';
import { DataSource } from 'typeorm';
import { webhookDeliveries } from './metrics';
import { SchemaGate } from './schema-gate';
import { TenantSlots } from './tenant-slots';

const SCAN_BATCH = 500;
/** Passes per tick at most, so a backlog drains quickly without one tick holding the loop for long. */
const SCAN_PASSES = 10;
/**
 * What a webhook request leaves of its send's mark (webhookSendInFlightMs) for its timer to fire late and the request
 * to be destroyed: it is cut off this long before the mark runs out at the latest.
 */
const SEND_MARK_SLACK_MS = 250;

/**
 * Webhook deliveries. The outbox pass turns new events into delivery rows (Postgres) and enqueues a job per row
 * (Redis: only a trigger); a delivery job signs and POSTs one message and records the attempt. Pending rows whose job
 * was lost are enqueued again, so a Redis that forgets delays a delivery, never loses it.
 */
/** A failed attempt that BullMQ retries with backoff (thrown so that it does). */
class WebhookRetry extends Error {
  override readonly name = 'WebhookRetry';
}

/**
 * A delivery put back because its tenant holds its share of this process's slots: the caller delays the job until
 * `wakeAt` at the latest (spending no attempt) and hands `wakeWhenFree` what brings it back sooner.
 */
export interface DeferredDelivery {
  wakeAt: number;
  wakeWhenFree(wake: () => Promise<unknown>): void;
}

@Injectable()
export class WebhooksService implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private timer: NodeJS.Timeout | null = null;
  /** The outbox pass under way, which the shutdown waits for. */
  private readonly outbox = new BackgroundWork();
  private lastOwedPass = 0;
  /** A pass runs every WEBHOOK_SCAN_INTERVAL_MS: while Postgres is away, one line for the outage, not one a tick. */
  private readonly outboxOutage = new OutageLog();
  /** This process's delivery slots (about WORKER_CONCURRENCY across its shards), half at most to one tenant. */
  private readonly slots: TenantSlots;

  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly cipher: SecretsCipher,
    private readonly queue: WebhookDeliveryQueue,
    private readonly connectors: TenantConnectors,
    private readonly schema: SchemaGate,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    // A slot is held for one call: its timeout, and a margin for the address lookup and the connect.
    this.slots = new TenantSlots(TenantSlots.shareOf(config.WORKER_CONCURRENCY), config.WEBHOOK_TIMEOUT_MS + 1_000);
  }

  onApplicationBootstrap(): void {
    this.schedule();
  }

  /** Before Postgres and Redis close (the last hooks): the pass under way ends its transaction first. */
  async beforeApplicationShutdown(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.outbox.busy) this.logger.info('waiting for the webhook outbox pass under way to finish');
    await this.outbox.stop();
  }

  private schedule(): void {
    if (this.outbox.stopping) return;
    this.timer = setTimeout(() => {
      this.outbox
        .run(() => this.tick())
        ?.then(
          () => {
            const failures = this.outboxOutage.succeeded();
            if (failures !== undefined) this.logger.info({ failures }, 'webhook outbox passes work again');
            this.schedule();
          },
          (error: unknown) => {
            const note = this.outboxOutage.failed();
            if (note) {
              this.logger.warn(
                { err: error, unlogged: note.unlogged },
                'webhook outbox pass failed; retried on the next tick (logged again at most once a minute until one works)',
              );
            }
            this.schedule();
          },
        );
    }, this.config.WEBHOOK_SCAN_INTERVAL_MS);
    this.timer.unref();
  }

  /** One tick: drain new events into deliveries, then (every few seconds) re-enqueue deliveries whose job was lost. */
  async tick(): Promise<void> {
    if (!(await this.schema.open())) return;
    for (let pass = 0; pass < SCAN_PASSES && !this.outbox.stopping; pass += 1) {
      const result = await scanWebhookOutbox(this.db, SCAN_BATCH);
      if (!result) break;
      await this.enqueue(result.created);
      if (result.scanned < SCAN_BATCH) break;
    }
    const owedAfterMs = Math.max(30_000, 3 * this.config.WEBHOOK_TIMEOUT_MS);
    if (Date.now() - this.lastOwedPass < Math.min(owedAfterMs, 10_000)) return;
    this.lastOwedPass = Date.now();
    // Re-armed, not just added: the round's job may have ended without recording its attempt (see tryEnqueueOrRearm).
    for (const d of await owedWebhookDeliveries(this.db.manager, owedAfterMs, SCAN_BATCH)) {
      await this.queue.tryEnqueueOrRearm(d, d.backlog);
    }
  }

  private async enqueue(deliveries: OwedDelivery[]): Promise<void> {
    for (const d of deliveries) await this.queue.tryEnqueue(d, d.backlog);
  }

  /**
   * One attempt of one delivery. A failed attempt that is not the last throws, so BullMQ retries it with backoff; the
   * last one fails the delivery (and may disable the endpoint). Receivers see at-least-once delivery: the same
   * `webhook-id` again after a crash mid-attempt or a manual redelivery.
   */
  async deliver(
    deliveryId: string,
    round: number,
    attemptsMade: number,
    maxAttempts: number,
  ): Promise<string | DeferredDelivery> {
    const result = await this.attempt(deliveryId, round, attemptsMade, maxAttempts).catch((error: unknown) => {
      webhookDeliveries.inc({ result: error instanceof WebhookRetry ? 'retrying' : 'error' });
      throw error;
    });
    if (typeof result !== 'string') webhookDeliveries.inc({ result: 'deferred' });
    else webhookDeliveries.inc({ result: result.startsWith('skipped') ? 'skipped' : result });
    return result;
  }

  private async attempt(
    deliveryId: string,
    round: number,
    attemptsMade: number,
    maxAttempts: number,
  ): Promise<string | DeferredDelivery> {
    const delivery = await loadDeliveryToSend(this.db.manager, this.cipher, deliveryId, round);
    const skipped = await this.skipped(delivery, round);
    if (skipped !== null || !delivery) return skipped ?? 'skipped: delivery or endpoint deleted';
    const { tenantId } = delivery;
    if (delivery.secret === null) {
      // Nothing can be signed, so nothing is sent: the attempt fails as one that reached no receiver (retried with
      // backoff — another reconciler may hold the right key — then failed and counted against the endpoint). Logged
      // at the round's first attempt, without the key or the secret.
      const reason = delivery.secretUnreadable ?? 'the endpoint’s signing secret cannot be opened';
      if (attemptsMade === 0) {
        this.logger.warn(
          { tenantId, endpointId: delivery.endpointId, deliveryId, round, reason },
          'webhook delivery not sent: the signing secret cannot be opened',
        );
      }
      return this.record(delivery, round, attemptsMade, maxAttempts, {
        outcome: { ok: false, status: null, error: reason },
        retryable: true,
      });
    }
    const full = this.slots.take(tenantId);
    if (full) {
      // One wake on file per round of a delivery (its job), however often it is put back.
      const job = `${deliveryId}#${round}`;
      return { wakeAt: full.wakeAt, wakeWhenFree: (wake) => this.slots.wakeWhenFree(tenantId, job, wake) };
    }
    let posted: Awaited<ReturnType<WebhooksService['post']>>;
    try {
      posted = await this.post(delivery, round, delivery.secret);
    } finally {
      this.slots.release(tenantId);
    }
    if ('skipped' in posted) return posted.skipped;
    return this.record(delivery, round, attemptsMade, maxAttempts, posted);
  }

  /**
   * Why an attempt on `delivery` (as just read) sends nothing, or null: it is gone with its endpoint, another round or
   * attempt settled it, or its endpoint is (or was, for it) disabled — then it is recorded skipped here.
   */
  private async skipped(delivery: DeliveryToSend | null, round: number): Promise<string | null> {
    if (!delivery) return 'skipped: delivery or endpoint deleted';
    if (delivery.skip === 'endpoint_disabled') {
      await skipWebhookDelivery(this.db.manager, delivery.id, round, ENDPOINT_DISABLED_SKIP);
      return 'skipped: endpoint disabled';
    }
    return delivery.skip ? `skipped: ${delivery.skip}` : null;
  }

  /** Records one attempt's outcome; a failure that will be retried throws (BullMQ's backoff). */
  private async record(
    delivery: DeliveryToSend,
    round: number,
    attemptsMade: number,
    maxAttempts: number,
    { outcome, retryable }: { outcome: AttemptOutcome; retryable: boolean },
  ): Promise<string> {
    const deliveryId = delivery.id;
    const final = outcome.ok || !retryable || attemptsMade + 1 >= maxAttempts;
    const recorded = await recordWebhookAttempt(this.db, {
      deliveryId,
      round,
      outcome,
      final,
      disableAfter: this.config.WEBHOOK_DISABLE_AFTER,
    });
    if (recorded.disabled) {
      this.logger.warn(
        { tenantId: delivery.tenantId, endpointId: delivery.endpointId, reason: recorded.disabled.reason },
        'webhook endpoint disabled after repeated failures',
      );
      await this.enqueue(recorded.disabled.notices);
    }
    if (recorded.state === 'retrying' && !outcome.ok) {
      throw new WebhookRetry(`webhook delivery ${deliveryId} failed (${outcome.error}); retried with backoff`);
    }
    return recorded.state;
  }

  /**
   * The attempt's outcome; `skipped` (why) when the delivery, read again before signing, is no longer to be sent (its
   * endpoint deleted or disabled, or the delivery settled, since it was read).
   */
  private async post(
    delivery: DeliveryToSend,
    round: number,
    secret: string,
  ): Promise<{ outcome: AttemptOutcome; retryable: boolean } | { skipped: string }> {
    // The tenant's http allowlist and the SSRF rules apply to every send, not only when the endpoint was created: an
    // allowlist entry removed since then, or a host now resolving to a private address, stops the delivery.
    const target = checkTarget(
      delivery.url,
      await this.connectors.httpAllowlist(delivery.tenantId),
      this.connectors.platform,
    );
    if ('code' in target) return { outcome: { ok: false, status: null, error: target.message }, retryable: false };
    // An IP literal is connected to without a lookup (lookupFor never runs): the platform's services are judged here.
    const reserved = isIP(target.host) ? await platformRefusalOf(target) : null;
    if (reserved) return { outcome: { ok: false, status: null, error: reserved }, retryable: false };
    // The body is the tenant's events as stored: a value written in plain before the tenant made it a secret (a
    // reason, params) is sent as its placeholder, as the API answers it. Read before the send is marked in flight.
    let redact: Redact;
    try {
      redact = await this.connectors.answerRedactorOf(delivery.tenantId);
    } catch (error) {
      if (!(error instanceof SecretUnreadableError)) throw error;
      // Not sent unredacted; a failed attempt (retried — another reconciler may hold the key), not a job that throws
      // before anything is recorded, as a signing secret that does not open is.
      const reason = 'the tenant’s connector secrets do not open with this SECRETS_KEY, so the body cannot be redacted';
      return { outcome: { ok: false, status: null, error: reason }, retryable: true };
    }
    // Read again after the checks, right before signing: an endpoint deleted since the delivery was read (the
    // allowlist read above can wait on a busy database) is sent nothing once its delete has answered — its secret is
    // gone; nor one disabled meanwhile (the disable skipped the delivery, and an enable since must not send it), nor a
    // delivery another attempt settled. The same statement marks the send in flight: a delete that commits from then on
    // waits, before it answers, until the request below has ended (the mark cleared) or its time has passed.
    const mark = randomUUID();
    const inFlightMs = webhookSendInFlightMs(this.config);
    // Before the statement is sent, so before the database's clock the mark is dated by: the mark is good until at
    // least `inFlightMs` from here.
    const markedFrom = performance.now();
    let refused: string | null = null;
    let exchange: Awaited<ReturnType<typeof httpExchange>>;
    try {
      const skipped = await this.skipped(
        await markWebhookSending(this.db.manager, this.cipher, { deliveryId: delivery.id, round, mark, inFlightMs }),
        round,
      );
      if (skipped !== null) return { skipped };
      const body = redact(delivery.body);
      const sentAt = new Date();
      // httpExchange sends JSON.stringify(body): the signature is over exactly those bytes.
      const signature = new Webhook(secret).sign(delivery.id, sentAt, JSON.stringify(body));
      // The timeout covers the address lookup and the connect too: the request is destroyed at its end, so nothing
      // of it is written after httpExchange has answered. It ends before its mark runs out (a delete answers then, the
      // mark cleared or not): a statement slow to come back (a slow commit, a busy database) leaves it less time.
      const timeoutMs = Math.max(
        0,
        Math.min(this.config.WEBHOOK_TIMEOUT_MS, inFlightMs - SEND_MARK_SLACK_MS - (performance.now() - markedFrom)),
      );
      exchange = await httpExchange({
        method: 'POST',
        url: delivery.url,
        headers: {
          'webhook-id': delivery.id,
          'webhook-timestamp': String(Math.floor(sentAt.getTime() / 1000)),
          'webhook-signature': signature,
          'user-agent': 'Verity-Webhooks/1',
        },
        body,
        timeoutMs,
        // A 2xx settles it (Standard Webhooks): what the receiver sends after its status is not waited for.
        statusOnly: true,
        lookup: lookupFor(target, (message) => (refused = message)),
      });
    } finally {
      // Not clearing it only makes a delete wait until its time: the attempt's outcome is still recorded.
      await clearWebhookSend(this.db.manager, mark).catch((error: unknown) =>
        this.logger.warn(
          { deliveryId: delivery.id, err: error instanceof Error ? error.message : String(error) },
          'webhook send mark not cleared: a delete of its endpoint waits until its time',
        ),
      );
    }
    if (refused !== null) return { outcome: { ok: false, status: null, error: refused }, retryable: false };
    if (exchange.kind !== 'response') {
      return { outcome: { ok: false, status: null, error: `${exchange.code}: ${exchange.message}` }, retryable: true };
    }
    if (exchange.status >= 200 && exchange.status < 300) {
      return { outcome: { ok: true, status: exchange.status }, retryable: false };
    }
    return {
      outcome: { ok: false, status: exchange.status, error: `the endpoint answered ${exchange.status}` },
      retryable: true,
    };
  }
}
