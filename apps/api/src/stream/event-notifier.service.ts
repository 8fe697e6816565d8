import { Inject, Injectable, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { TenantSecretsCache } from '@verity/connectors';
import {
  KEY_REVOCATION_CHANNEL,
  LISTEN_APPLICATION_NAME,
  ResilientPgClient,
  TENANT_SECRETS_CHANNEL,
  heardSoFar,
  listenForKeyRevocations,
  listenForSecretChanges,
} from '@verity/persistence';
import {
  LOGGER,
  Logger,
  RedisClient,
  VERITY_CONFIG,
  VerityConfig,
  createRedisClient,
  secretsFreshnessRoundTrips,
} from '@verity/platform';
import { eventsChannel } from '@verity/queues';
import { ApiKeyService } from '../auth/api-key.service';

type Listener = () => void;

/**
 * Wakes the streams of an execution when any process commits an event for it. Writers announce their commits on a
 * Redis channel (libs/persistence event-signal.ts); the announcement only says "look" — the events table is the
 * truth, and streams poll it anyway while the subscription is down. The channel is subscribed only while a stream is
 * open: every commit of every worker is announced, and an API process with no stream would read each announcement for
 * nothing. Key revocations still arrive by Postgres NOTIFY (rare, and sent in the revoking transaction itself), on one
 * LISTEN connection per API process; so do changes of a tenant's secrets (TENANT_SECRETS_CHANNEL), on the same
 * connection: the secret values kept for answers (TenantSecretsCache) are kept only while it listens.
 */
@Injectable()
export class EventNotifier implements OnModuleInit, OnApplicationShutdown {
  private client: ResilientPgClient | null = null;
  /** A LISTEN connection being opened (at start, or a reconnect): ended at shutdown too, or it would outlive it. */
  private connecting: ResilientPgClient | null = null;
  private subscriber: RedisClient | null = null;
  /** Whether announcements arrive: the channel is subscribed on a ready connection. */
  private subscribed = false;
  /** A SUBSCRIBE or UNSUBSCRIBE is on its way. */
  private switching = false;
  /**
   * The connection's subscription may differ from `subscribed`: after a reconnect (ioredis resubscribes what it had, on
   * its own) or a failed switch. The next look sends what is wanted whatever `subscribed` says.
   */
  private unsure = true;
  private readonly listeners = new Map<string, Set<Listener>>();
  private closing = false;
  private reconnectTimer: NodeJS.Timeout | null = null;

  constructor(
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    @Inject(LOGGER) private readonly logger: Logger,
    private readonly keys: ApiKeyService,
    private readonly secretValues: TenantSecretsCache,
  ) {}

  async onModuleInit(): Promise<void> {
    this.subscribeToEvents();
    await this.connect().catch((error: unknown) => {
      this.logger.warn({ err: error }, 'LISTEN connection failed; revocations wait for the key cache to expire');
      this.scheduleReconnect();
    });
  }

  private subscribeToEvents(): void {
    // A connection of its own (a subscribed connection can do nothing else), reconnecting forever, subscribed while a
    // stream listens (followListeners). On a Redis Cluster it subscribes on one node; a PUBLISH on any node reaches it.
    const subscriber = createRedisClient(this.config, 'worker', 'verity-api-events');
    // One message may announce several executions (ids joined by commas; see QueuesModule).
    subscriber.on('message', (_channel: string, ids: string) => {
      for (const executionId of ids.split(',')) this.wake(executionId);
    });
    subscriber.on('ready', () => {
      this.unsure = true;
      // After ioredis has finished its own 'ready' work, which resubscribes what the lost connection had: what is
      // wanted now is sent after that, on the same connection, so it is what stands.
      setImmediate(() => this.followListeners());
    });
    subscriber.on('close', () => {
      this.subscribed = false;
    });
    this.subscriber = subscriber;
  }

  /**
   * Subscribed while any stream listens, unsubscribed when none does. Called whenever either changes (and when the
   * connection is ready again); one SUBSCRIBE or UNSUBSCRIBE at a time, each followed by another look, so a stream
   * that opened or closed meanwhile is never left out.
   */
  private followListeners(): void {
    const subscriber = this.subscriber;
    if (!subscriber || this.switching || this.closing || subscriber.status !== 'ready') return;
    const wanted = this.listeners.size > 0;
    if (wanted === this.subscribed && !this.unsure) return;
    const channel = eventsChannel(this.config.QUEUE_PREFIX);
    this.switching = true;
    this.unsure = false;
    const done = () => {
      this.switching = false;
      this.followListeners();
    };
    const failed = () => {
      // Tried again when the connection is ready again, or when a stream opens or closes.
      this.switching = false;
      this.unsure = true;
    };
    if (wanted) {
      subscriber.subscribe(channel).then(
        () => {
          this.subscribed = true;
          // Anything committed before the subscription took effect: wake every stream up to re-read.
          for (const id of this.listeners.keys()) this.wake(id);
          done();
        },
        (error: unknown) => {
          this.logger.warn({ err: error }, 'events subscription failed; streams poll');
          failed();
        },
      );
    } else {
      this.subscribed = false;
      subscriber.unsubscribe(channel).then(done, failed);
    }
  }

  private wake(executionId: string): void {
    const set = this.listeners.get(executionId);
    if (set) for (const listener of set) listener();
  }

  private async connect(): Promise<void> {
    // Bounded like the pool's sessions: ending it on shutdown does not wait for a server that stopped answering.
    const client = new ResilientPgClient({
      connectionString: this.config.DATABASE_URL,
      query_timeout: this.config.DATABASE_QUERY_TIMEOUT_MS,
      application_name: LISTEN_APPLICATION_NAME,
    });
    const lost = () => {
      if (this.client === client) {
        this.client = null;
        this.keys.setRevocationsLive(false);
        this.secretValues.setLive(false);
      }
      client.end().catch(() => undefined);
      this.scheduleReconnect();
    };
    client.on('error', lost);
    client.on('end', lost);
    client.on('notification', (message) => {
      if (message.channel === KEY_REVOCATION_CHANNEL) this.keys.invalidateAll();
      if (message.channel === TENANT_SECRETS_CHANNEL && message.payload) this.secretValues.changed(message.payload);
    });
    this.connecting = client;
    try {
      await client.connect();
      await listenForKeyRevocations(client);
      await listenForSecretChanges(client);
    } finally {
      if (this.connecting === client) this.connecting = null;
    }
    this.client = client;
    this.keys.invalidateAll();
    this.keys.setRevocationsLive(true);
    // Nothing read before now is kept (setLive drops all): a change committed while no one listened is not missed.
    this.secretValues.setLive(
      true,
      // One at a time, shared by whoever waits (TenantSecretsCache).
      () => {
        secretsFreshnessRoundTrips.inc();
        return heardSoFar(client);
      },
    );
  }

  private scheduleReconnect(): void {
    if (this.closing || this.reconnectTimer) return;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      this.connect().catch(() => this.scheduleReconnect());
    }, 1000);
  }

  /** Whether new events are announced right now (else streams poll more often). */
  get listening(): boolean {
    return this.subscribed;
  }

  subscribe(executionId: string, listener: Listener): () => void {
    let set = this.listeners.get(executionId);
    if (!set) {
      set = new Set();
      this.listeners.set(executionId, set);
    }
    set.add(listener);
    this.followListeners();
    return () => {
      set.delete(listener);
      if (set.size === 0) this.listeners.delete(executionId);
      this.followListeners();
    };
  }

  async onApplicationShutdown(): Promise<void> {
    this.closing = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.subscriber?.disconnect();
    // A reconnect under way is ended with the live one: its LISTEN would otherwise be taken after shutdown and held.
    await Promise.all([this.client, this.connecting].map((client) => client?.end().catch(() => undefined)));
  }
}
