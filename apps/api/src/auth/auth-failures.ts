import type { RedisClient as Redis } from '@verity/platform';
import { isIP } from 'node:net';
import { canonicalAddress } from '@verity/connectors';
import { redisAnswerWithin } from '../redis-limits';

const WINDOW_MS = 60_000;

/**
 * Counts failed authentications (an unknown or revoked key) per client address, in Redis so every API process sees
 * the same count. Once an address has used its failures for the window, every request of it that presents a key is
 * refused with 429 until the window ends — the right key included, so that a guesser cannot tell a hit from the
 * answer. If Redis does not answer in time, this process' own count decides.
 */
/** Lua: 0 while the address may still present keys, else the seconds until it may again (shared with admission.ts). */
export const LUA_FAILURES_BLOCKED_FOR = `
local function failures_blocked_for(key, limit, window)
  local n = tonumber(redis.call('GET', key) or '0')
  if n < limit then return 0 end
  local ttl = redis.call('PTTL', key)
  if ttl < 0 then ttl = window end
  return math.max(1, math.ceil(ttl / 1000))
end`;

/**
 * `check`: the seconds the address is blocked for (0: not). `fail`: one more failure. `reserve`: check and, when not
 * blocked, count one failure in the same step — a key not known yet is counted as a failure before it is looked up,
 * so of any number of guesses sent at once no more than the limit get past the check. `refund`: take back the
 * reservation of a key that was found.
 */
const CHECK_OR_FAIL = `${LUA_FAILURES_BLOCKED_FOR}
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
if ARGV[3] == 'refund' then
  if tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then redis.call('DECR', KEYS[1]) end
  return 0
end
if ARGV[3] == 'reserve' then
  local blocked = failures_blocked_for(KEYS[1], limit, window)
  if blocked > 0 then return blocked end
end
if ARGV[3] == 'fail' or ARGV[3] == 'reserve' then
  local n = redis.call('INCR', KEYS[1])
  if n == 1 then redis.call('PEXPIRE', KEYS[1], window) end
  return 0
end
return failures_blocked_for(KEYS[1], limit, window)`;

type FailureRedis = Redis & {
  verityAuthFailures(
    key: string,
    limit: number,
    windowMs: number,
    mode: 'check' | 'fail' | 'reserve' | 'refund',
  ): Promise<number>;
};

export class AuthFailureLimiter {
  private readonly redis: FailureRedis;
  private readonly local = new Map<string, { failures: number; until: number }>();

  constructor(
    redis: Redis,
    private readonly prefix: string,
    private readonly perMinute: number,
    private readonly timeoutMs = 100,
  ) {
    if (!('verityAuthFailures' in redis)) {
      redis.defineCommand('verityAuthFailures', { numberOfKeys: 1, lua: CHECK_OR_FAIL });
    }
    this.redis = redis as FailureRedis;
  }

  /** 0 when the address may try a key, else the seconds until it may again. */
  async blockedFor(address: string): Promise<number> {
    const shared = await redisAnswerWithin(
      this.redis.verityAuthFailures(this.key(address), this.perMinute, WINDOW_MS, 'check'),
      this.timeoutMs,
    );
    return shared ?? this.locallyBlockedFor(address);
  }

  /** The key and arguments of `failures_blocked_for` for this address (see admission.ts). */
  scriptArgs(address: string): { key: string; args: [limit: number, windowMs: number] } {
    return { key: this.key(address), args: [this.perMinute, WINDOW_MS] };
  }

  /** This process' own count: what decides while Redis does not answer. */
  locallyBlockedFor(address: string): number {
    const entry = this.local.get(failureScope(address));
    if (!entry || entry.until <= Date.now() || entry.failures < this.perMinute) return 0;
    return Math.max(1, Math.ceil((entry.until - Date.now()) / 1000));
  }

  /**
   * Before a key that is not known yet is looked up: 0 when the address may present it — it is then counted as a
   * failure already, in the same step as the check (`refund` it when the key is found) — else the seconds until it
   * may. Checked and counted apart, guesses sent all at once would each find the address unblocked and all be
   * answered: the limit would bound nothing.
   */
  async reserve(address: string): Promise<number> {
    const shared = await redisAnswerWithin(
      this.redis.verityAuthFailures(this.key(address), this.perMinute, WINDOW_MS, 'reserve'),
      this.timeoutMs,
    );
    if (shared !== null) {
      if (shared === 0) this.countLocally(address);
      return shared;
    }
    // This process' own count decides while Redis does not answer, checked and counted in one step too.
    const local = this.locallyBlockedFor(address);
    if (local > 0) return local;
    this.countLocally(address);
    return 0;
  }

  /** A reserved key was found: it was no failure. */
  async refund(address: string): Promise<void> {
    const entry = this.local.get(failureScope(address));
    if (entry && entry.failures > 0) entry.failures -= 1;
    await redisAnswerWithin(
      this.redis.verityAuthFailures(this.key(address), this.perMinute, WINDOW_MS, 'refund'),
      this.timeoutMs,
    );
  }

  private countLocally(address: string): void {
    const now = Date.now();
    const entry = this.local.get(failureScope(address));
    if (!entry || entry.until <= now) this.local.set(failureScope(address), { failures: 1, until: now + WINDOW_MS });
    else entry.failures += 1;
    if (this.local.size > 50_000) this.local.clear();
  }

  async recordFailure(address: string): Promise<void> {
    this.countLocally(address);
    await redisAnswerWithin(
      this.redis.verityAuthFailures(this.key(address), this.perMinute, WINDOW_MS, 'fail'),
      this.timeoutMs,
    );
  }

  /** The limit is part of the key: processes configured differently do not share (or exhaust) one count. */
  private key(address: string): string {
    return `${this.prefix}:authfail:${this.perMinute}:${failureScope(address)}`;
  }
}

/**
 * What one client's failures are counted against: its IPv4 address (an IPv4-mapped IPv6 address is that IPv4 address),
 * or the /64 network of its IPv6 address — one home or one server gets 2^64 addresses, and counted one by one, a guesser
 * would take the next address for every guess (red team round 7).
 */
export function failureScope(address: string): string {
  const canonical = canonicalAddress(address);
  if (isIP(canonical) !== 6) return canonical;
  return `${canonical.split(':').slice(0, 4).join(':')}::/64`;
}
