import { Inject, Injectable, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { LOGGER, Logger, VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { Client } from 'pg';
import { ApiKeyService } from '../auth/api-key.service';

type Listener = () => void;

/**
 * One LISTEN connection per API process. Events are written by any worker in any process; Postgres NOTIFY (sent at
 * commit by a trigger) wakes the streams of that execution, which then read the table — the table is the truth,
 * the notification only says "look". Key revocations arrive on a second channel.
 */
@Injectable()
export class EventNotifier implements OnModuleInit, OnApplicationShutdown {
  private client: Client | null = null;
  private readonly listeners = new Map<string, Set<Listener>>();
  private closing = false;
  private reconnectTimer: NodeJS.Timeout | null = null;

  constructor(
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    @Inject(LOGGER) private readonly logger: Logger,
    private readonly keys: ApiKeyService,
  ) {}

  async onModuleInit(): Promise<void> {
    await this.connect().catch((error: unknown) => {
      this.logger.warn({ err: error }, 'LISTEN connection failed; streams fall back to polling until it returns');
      this.scheduleReconnect();
    });
  }

  private async connect(): Promise<void> {
    const client = new Client({ connectionString: this.config.DATABASE_URL });
    const lost = () => {
      if (this.client === client) {
        this.client = null;
        this.keys.setRevocationsLive(false);
      }
      client.end().catch(() => undefined);
      this.scheduleReconnect();
    };
    client.on('error', lost);
    client.on('end', lost);
    client.on('notification', (message) => {
      if (message.channel === 'verity_keys') {
        this.keys.invalidateAll();
        return;
      }
      const set = this.listeners.get(message.payload ?? '');
      if (set) for (const listener of set) listener();
    });
    await client.connect();
    await client.query('LISTEN verity_events');
    await client.query('LISTEN verity_keys');
    this.client = client;
    // Anything that happened while we were not listening: wake everyone up to re-read.
    for (const set of this.listeners.values()) for (const listener of set) listener();
    this.keys.invalidateAll();
    this.keys.setRevocationsLive(true);
  }

  private scheduleReconnect(): void {
    if (this.closing || this.reconnectTimer) return;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      this.connect().catch(() => this.scheduleReconnect());
    }, 1000);
  }

  get listening(): boolean {
    return this.client !== null;
  }

  subscribe(executionId: string, listener: Listener): () => void {
    let set = this.listeners.get(executionId);
    if (!set) {
      set = new Set();
      this.listeners.set(executionId, set);
    }
    set.add(listener);
    return () => {
      set.delete(listener);
      if (set.size === 0) this.listeners.delete(executionId);
    };
  }

  async onApplicationShutdown(): Promise<void> {
    this.closing = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    await this.client?.end().catch(() => undefined);
  }
}
