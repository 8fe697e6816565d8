import { LUA_NOW_MS, type RedisClient as Redis, redisAnswerWithin } from '@verity/platform';

/** A token bucket per API key (per process): bursts are fine, sustained overload gets 429 with Retry-After. */
export class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  constructor(private readonly perMinute: number) {}

  /** Returns 0 when allowed, else the seconds to wait. */
  take(key: string, now = Date.now()): number {
    const capacity = this.perMinute;
    const refillPerMs = this.perMinute / 60_000;
    const bucket = this.buckets.get(key) ?? { tokens: capacity, at: now };
    bucket.tokens = Math.min(capacity, bucket.tokens + (now - bucket.at) * refillPerMs);
    bucket.at = now;
    if (bucket.tokens < 1) {
      this.buckets.set(key, bucket);
      return Math.max(1, Math.ceil((1 - bucket.tokens) / refillPerMs / 1000));
    }
    bucket.tokens -= 1;
    this.buckets.set(key, bucket);
    if (this.buckets.size > 50_000) this.buckets.clear();
    return 0;
  }
}

/**
 * The same token bucket kept in Redis, so the budget holds across every API process (a per-process bucket let N
 * processes serve N times the rate). The bucket lives in one hash per key and limit, updated by one Lua script on
 * Redis' clock. If Redis does not answer within `timeoutMs`, the request is judged by this process' own bucket: an
 * outage of Redis must not turn into an outage of the API.
 */
/** Lua: takes a token from the bucket at `key` — 0, or the seconds to wait when it is empty (shared with admission.ts). */
export const LUA_TAKE_TOKEN = `
local function take_token(key, capacity, refill_per_ms)
  ${LUA_NOW_MS}
  local bucket = redis.call('HMGET', key, 'tokens', 'at')
  local tokens = tonumber(bucket[1]) or capacity
  local at = tonumber(bucket[2]) or now
  tokens = math.min(capacity, tokens + math.max(0, now - at) * refill_per_ms)
  local wait = 0
  if tokens < 1 then
    wait = math.max(1, math.ceil((1 - tokens) / refill_per_ms / 1000))
  else
    tokens = tokens - 1
  end
  redis.call('HSET', key, 'tokens', tostring(tokens), 'at', tostring(now))
  redis.call('PEXPIRE', key, 120000)
  return wait
end`;

const TAKE_TOKEN = `${LUA_TAKE_TOKEN}
return take_token(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]))`;

type TokenRedis = Redis & { verityTakeToken(key: string, capacity: number, refillPerMs: number): Promise<number> };

export class SharedRateLimiter {
  private readonly local: RateLimiter;
  private readonly redis: TokenRedis;

  constructor(
    redis: Redis,
    private readonly prefix: string,
    private readonly perMinute: number,
    private readonly timeoutMs = 100,
  ) {
    this.local = new RateLimiter(perMinute);
    if (!('verityTakeToken' in redis)) redis.defineCommand('verityTakeToken', { numberOfKeys: 1, lua: TAKE_TOKEN });
    this.redis = redis as TokenRedis;
  }

  /** Returns 0 when allowed, else the seconds to wait. */
  async take(key: string): Promise<number> {
    const { key: bucket, args } = this.scriptArgs(key);
    const shared = await redisAnswerWithin(this.redis.verityTakeToken(bucket, ...args), this.timeoutMs);
    return shared ?? this.local.take(key);
  }

  /** The bucket and arguments of `take_token` for this API key (see admission.ts). */
  scriptArgs(key: string): { key: string; args: [capacity: number, refillPerMs: number] } {
    return {
      key: `${this.prefix}:ratelimit:${this.perMinute}:${key}`,
      args: [this.perMinute, this.perMinute / 60_000],
    };
  }

  /** This process' own bucket: what decides while Redis does not answer. */
  takeLocally(key: string): number {
    return this.local.take(key);
  }
}
