import {
  AuthFailureLimiter,
  LUA_FAILURES_BLOCKED_FOR,
  type RedisClient as Redis,
  redisHashTag,
  redisRepliesWithin,
} from '@verity/platform';
import { LUA_TAKE_TOKEN, SharedRateLimiter } from './rate-limiter';

/**
 * The two Redis checks of an authenticated request as one script: the address' failed authentications first and, only
 * when it may still present keys, a token from the key's bucket. Replies {seconds the address is blocked for, seconds
 * to wait for a token}. Both keys start with QUEUE_PREFIX, whose hash tag puts them in one slot on a Redis Cluster.
 */
const ADMIT = `${LUA_FAILURES_BLOCKED_FOR}
${LUA_TAKE_TOKEN}
local blocked = failures_blocked_for(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]))
if blocked > 0 then return {blocked, 0} end
return {0, take_token(KEYS[2], tonumber(ARGV[3]), tonumber(ARGV[4]))}`;

type AdmissionRedis = Redis & {
  verityAdmit(failures: string, bucket: string, ...args: number[]): Promise<unknown>;
};

export interface Admission {
  /** Seconds until the address may present keys again (0: it may). */
  blockedFor: number;
  /** Seconds until the key has a token again (0: taken). Not taken while the address is blocked. */
  rateWait: number;
}

/**
 * Admits a request whose key this process already knows in one Redis round trip instead of two (the check of the
 * address, then the token). What it decides is what the two separate calls decide; if Redis does not answer in time,
 * this process' own counts decide, as they do for each call alone.
 */
export class RequestAdmission {
  private readonly redis: AdmissionRedis;
  /** Two keys in one script must share a slot on a Redis Cluster: only a hash tag in the prefix promises that. */
  private readonly oneSlot: boolean;

  constructor(
    redis: Redis,
    prefix: string,
    private readonly failures: AuthFailureLimiter,
    private readonly timeoutMs = 100,
  ) {
    if (!('verityAdmit' in redis)) redis.defineCommand('verityAdmit', { numberOfKeys: 2, lua: ADMIT });
    this.redis = redis as AdmissionRedis;
    this.oneSlot = redisHashTag(prefix) !== null;
  }

  async admit(address: string, keyId: string, rate: SharedRateLimiter): Promise<Admission> {
    if (!this.oneSlot) {
      const blockedFor = await this.failures.blockedFor(address);
      return { blockedFor, rateWait: blockedFor > 0 ? 0 : await rate.take(keyId) };
    }
    const failures = this.failures.scriptArgs(address);
    const bucket = rate.scriptArgs(keyId);
    const replies = await redisRepliesWithin(
      this.redis.verityAdmit(failures.key, bucket.key, ...failures.args, ...bucket.args),
      this.timeoutMs,
    );
    if (replies && replies.length === 2) return { blockedFor: replies[0], rateWait: replies[1] };
    const blockedFor = this.failures.locallyBlockedFor(address);
    return { blockedFor, rateWait: blockedFor > 0 ? 0 : rate.takeLocally(keyId) };
  }
}
