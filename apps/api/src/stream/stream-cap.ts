import { randomUUID } from 'node:crypto';
import { LUA_NOW_MS, type RedisClient as Redis, redisAnswerWithin } from '@verity/platform';

/**
 * Open streams per API key, counted across every API process: each open stream holds a lease in a Redis sorted set
 * per key (member = stream, score = lease expiry on Redis' clock), renewed on every heartbeat and dropped on close.
 * A process that dies leaves leases that simply expire. When Redis does not answer within `timeoutMs`, this process'
 * own count decides: an outage of Redis must not become an outage of the streams.
 */
const ACQUIRE = `${LUA_NOW_MS}
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return 1`;

const RENEW = `${LUA_NOW_MS}
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) * 2)
return 1`;

type LeaseRedis = Redis & {
  verityStreamAcquire(key: string, cap: number, leaseMs: number, member: string): Promise<number>;
  verityStreamRenew(key: string, leaseMs: number, member: string): Promise<number>;
};

export interface StreamLease {
  renew(): void;
  release(): void;
}

export class StreamCap {
  private readonly redis: LeaseRedis;
  private readonly localOpen = new Map<string, number>();

  constructor(
    redis: Redis,
    private readonly prefix: string,
    private readonly cap: number,
    private readonly leaseMs: number,
    private readonly timeoutMs = 200,
  ) {
    if (!('verityStreamAcquire' in redis)) {
      redis.defineCommand('verityStreamAcquire', { numberOfKeys: 1, lua: ACQUIRE });
      redis.defineCommand('verityStreamRenew', { numberOfKeys: 1, lua: RENEW });
    }
    this.redis = redis as LeaseRedis;
  }

  /** A lease for one more stream of this key, or null when the key already has `cap` open. */
  async acquire(keyId: string): Promise<StreamLease | null> {
    const key = `${this.prefix}:streams:${keyId}`;
    const member = randomUUID();
    const shared = await redisAnswerWithin(
      this.redis.verityStreamAcquire(key, this.cap, this.leaseMs, member),
      this.timeoutMs,
    );
    const local = this.localOpen.get(keyId) ?? 0;
    if (shared === 0) return null;
    if (shared === null && local >= this.cap) {
      // Refused on this process' count while Redis was slow: the lease may still land there; take it back (same
      // connection, so this runs after it).
      this.redis.zrem(key, member).catch(() => undefined);
      return null;
    }
    this.localOpen.set(keyId, local + 1);
    let released = false;
    return {
      renew: () => {
        if (!released) this.redis.verityStreamRenew(key, this.leaseMs, member).catch(() => undefined);
      },
      release: () => {
        if (released) return;
        released = true;
        this.localOpen.set(keyId, Math.max(0, (this.localOpen.get(keyId) ?? 1) - 1));
        this.redis.zrem(key, member).catch(() => undefined);
      },
    };
  }
}
