import { Inject, Injectable, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { LOGGER, Logger, RedisClient, VERITY_CONFIG, VerityConfig, createRedisClient } from '@verity/platform';
import { PRODUCER_REDIS, mcpCancelChannel } from '@verity/queues';

/**
 * The MCP requests this API process is answering, by API key and JSON-RPC request id, so that a client's
 * `notifications/cancelled` stops the request it names. Over stateless Streamable HTTP the MCP client does not close
 * the cancelled request's response: it POSTs the notification as a request of its own, which a fresh server (on any
 * API process) would receive and ignore, while the cancelled call — a wait_for_execution holding one of the key's
 * streams for up to 50 s — ran on. So every cancellation is carried out here at once and passed to the other API
 * processes on a Redis channel (each carries out the ones naming its requests). Only requests made with the same key
 * are matched: a key can cancel nothing of another key's, let alone another tenant's. And within a key, only the
 * requests of the session (Mcp-Session-Id) the cancellation was sent in, when it was sent in one: clients sharing a key
 * number their requests alike (1, 2, 3…), and one client's cancellation of its request 1 stopped every other client's
 * request 1. A cancellation sent without a session (a client that never initialized) still names the key's requests of
 * that id in any session, as before: there is nothing to tell its own from another's.
 */
@Injectable()
export class McpCancellations implements OnModuleInit, OnApplicationShutdown {
  private readonly inFlight = new Map<string, Set<{ session: string | undefined; cancel: () => void }>>();
  private subscriber: RedisClient | null = null;
  private readonly channel: string;

  constructor(
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    @Inject(LOGGER) private readonly logger: Logger,
    @Inject(PRODUCER_REDIS) private readonly publisher: RedisClient,
  ) {
    this.channel = mcpCancelChannel(config.QUEUE_PREFIX);
  }

  onModuleInit(): void {
    // A connection of its own (a subscribed connection can do nothing else); ioredis subscribes again after a
    // reconnect. Cancellations are rare and tiny: the channel is subscribed for the process's whole life.
    const subscriber = createRedisClient(this.config, 'worker', 'verity-api-mcp-cancel');
    subscriber.on('message', (channel: string, message: string) => {
      if (channel === this.channel) this.cancelHere(message);
    });
    subscriber.subscribe(this.channel).catch((error: unknown) => {
      this.logger.warn({ err: error }, 'MCP cancellation subscription failed; cancellations reach this process only');
    });
    this.subscriber = subscriber;
  }

  onApplicationShutdown(): void {
    this.subscriber?.disconnect();
  }

  /**
   * Notes a request being answered, in `session` (its Mcp-Session-Id; undefined without one); `cancel` stops it.
   * Returns what forgets it (when its response has closed).
   */
  track(keyId: string, session: string | undefined, requestId: string | number, cancel: () => void): () => void {
    const entry = entryOf(keyId, requestId);
    let set = this.inFlight.get(entry);
    if (!set) {
      set = new Set();
      this.inFlight.set(entry, set);
    }
    let done = false;
    const once = () => {
      if (done) return;
      done = true;
      cancel();
    };
    const tracked = { session, cancel: once };
    set.add(tracked);
    return () => {
      set.delete(tracked);
      if (set.size === 0 && this.inFlight.get(entry) === set) this.inFlight.delete(entry);
    };
  }

  /**
   * A client's cancellation, sent in `session` (undefined without one): carried out here now, and on every other API
   * process through Redis.
   */
  cancel(keyId: string, session: string | undefined, requestId: string | number): void {
    const message =
      session === undefined ? entryOf(keyId, requestId) : `${entryOf(keyId, requestId)}\n${JSON.stringify(session)}`;
    this.cancelHere(message);
    this.publisher.publish(this.channel, message).catch((error: unknown) => {
      // Redis away: only this process heard it; a request elsewhere ends at its own bound (at most 50 s).
      this.logger.warn({ err: error }, 'MCP cancellation not passed on to the other API processes');
    });
  }

  /** Carries out a cancellation (the entry of its key and request id, then its session's name in JSON, if any). */
  private cancelHere(message: string): void {
    const [keyId, requestId, session] = message.split('\n');
    const entry = `${keyId}\n${requestId}`;
    const set = this.inFlight.get(entry);
    if (!set) return;
    const sender = session === undefined ? undefined : (JSON.parse(session) as string);
    for (const tracked of [...set]) {
      if (sender !== undefined && tracked.session !== sender) continue;
      set.delete(tracked);
      tracked.cancel();
    }
    if (set.size === 0 && this.inFlight.get(entry) === set) this.inFlight.delete(entry);
  }
}

/** The key id and the request id as JSON (so `1` and `"1"` differ), joined by a line break (in neither). */
function entryOf(keyId: string, requestId: string | number): string {
  return `${keyId}\n${JSON.stringify(requestId)}`;
}
