import { isIP } from 'node:net';
import { canonicalAddress } from './ip-address';
import type { RedisClient as Redis } from './redis';
import { redisAnswerWithin } from './redis-limits';

const WINDOW_MS = 60_000;

/**
 * Counts failed authentications (an unknown or revoked key, a wrong METRICS_TOKEN) per client address, in Redis so
 * every API process and every worker's ops port sees the same count. Once an address has used its failures for the window, every request of it that presents a key is
 * refused with 429 until the window ends — the right key included, so that a guesser cannot tell a hit from the
 * answer. If Redis does not answer in time, this process' own count decides.
 *
 * A key not known yet is looked up under a reservation: the failures and the lookups in flight of an address together
 * stay under the limit, so of any number of guesses sent at once no more than the limit are ever looked up. A
 * reservation is not a failure: a key that is found takes it back, and only a key that is not found turns it into one.
 * (Counted as failures, as they once were, valid keys looked up at once — a cold cache, clients behind one address —
 * blocked their own address for the minute without a single failure.)
 */
/**
 * Lua: 0 while the address may still present keys, else the seconds until it may again (shared with admission.ts).
 * The address' hash holds `failed` (this window's failures) and `pending` (its lookups in flight).
 */
export const LUA_FAILURES_BLOCKED_FOR = `
local function failures_blocked_for(key, limit, window)
  local n = tonumber(redis.call('HGET', key, 'failed') or '0')
  if n < limit then return 0 end
  local ttl = redis.call('PTTL', key)
  if ttl < 0 then ttl = window end
  return math.max(1, math.ceil(ttl / 1000))
end`;

/** What `reserve` answers when the address' lookups in flight fill its limit (it has not failed): try again shortly. */
const LUA_BUSY = -1;

/**
 * `check`: the seconds the address is blocked for (0: not). `fail`: one more failure. `reserve`: when not blocked and
 * the failures and lookups in flight leave room, one more lookup in flight (0), else the seconds blocked for, or -1
 * (busy: no room, no block). `found` / `unknown`: a reserved lookup ended — taken back, or turned into a failure.
 */
const CHECK_OR_FAIL = `${LUA_FAILURES_BLOCKED_FOR}
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local mode = ARGV[3]
local function expire_new()
  if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], window) end
end
if mode == 'check' then return failures_blocked_for(KEYS[1], limit, window) end
if mode == 'reserve' then
  local blocked = failures_blocked_for(KEYS[1], limit, window)
  if blocked > 0 then return blocked end
  local failed = tonumber(redis.call('HGET', KEYS[1], 'failed') or '0')
  local pending = tonumber(redis.call('HGET', KEYS[1], 'pending') or '0')
  if failed + pending >= limit then return ${LUA_BUSY} end
  redis.call('HINCRBY', KEYS[1], 'pending', 1)
  expire_new()
  return 0
end
if mode == 'found' or mode == 'unknown' then
  -- The window may have ended (the hash expired) while the lookup ran: nothing is in flight to take back then.
  if tonumber(redis.call('HGET', KEYS[1], 'pending') or '0') > 0 then redis.call('HINCRBY', KEYS[1], 'pending', -1) end
end
if mode == 'fail' or mode == 'unknown' then
  redis.call('HINCRBY', KEYS[1], 'failed', 1)
  expire_new()
end
return 0`;

type FailureRedis = Redis & {
  verityAuthFailures(
    key: string,
    limit: number,
    windowMs: number,
    mode: 'check' | 'fail' | 'reserve' | 'found' | 'unknown',
  ): Promise<number>;
};

/** A lookup may go ahead (`reserved`), the address is blocked, or its lookups in flight fill its limit (`busy`). */
export type Reservation = { kind: 'reserved' } | { kind: 'blocked'; seconds: number } | { kind: 'busy' };

/** How long a lookup waits for room among its address' lookups in flight before it is answered 429 (retry in 1 s). */
const RESERVE_WAIT_MS = 1_000;
/** A waiting lookup asks again this often (a place freed in another API process), or when this process frees one. */
const RESERVE_POLL_MS = 100;

export class AuthFailureLimiter {
  private readonly redis: FailureRedis;
  private readonly local = new Map<string, { failures: number; pending: number; until: number }>();
  /**
   * Lookups of this process waiting for room, per address scope, first come first woken: a lookup that ends here
   * wakes one of them. At most four times the limit wait; more are answered at once.
   */
  private readonly waiting = new Map<string, (() => void)[]>();

  constructor(
    redis: Redis,
    private readonly prefix: string,
    private readonly perMinute: number,
    private readonly timeoutMs = 100,
    private readonly reserveWaitMs = RESERVE_WAIT_MS,
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
    const entry = this.liveLocal(address);
    if (!entry || entry.failures < this.perMinute) return 0;
    return Math.max(1, Math.ceil((entry.until - Date.now()) / 1000));
  }

  /**
   * Before a key that is not known yet is looked up. Checked and counted in one step: checked and counted apart,
   * guesses sent all at once would each find the address unblocked, and the limit would bound nothing. When the
   * address' lookups in flight fill its limit, waits a little for one of them to end (valid keys end theirs within
   * milliseconds) before answering `busy`. A `reserved` lookup must end with `settle`.
   */
  async reserve(address: string): Promise<Reservation> {
    const first = await this.tryReserve(address);
    if (first.kind !== 'busy') return first;
    const scope = failureScope(address);
    const queue = this.waiting.get(scope) ?? [];
    if (queue.length >= 4 * this.perMinute) return first;
    this.waiting.set(scope, queue);
    const deadline = Date.now() + this.reserveWaitMs;
    while (Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          const at = queue.indexOf(wake);
          if (at >= 0) queue.splice(at, 1);
          resolve();
        };
        const timer = setTimeout(wake, Math.min(RESERVE_POLL_MS, Math.max(1, deadline - Date.now())));
        queue.push(wake);
      });
      const answer = await this.tryReserve(address);
      if (answer.kind !== 'busy') {
        if (queue.length === 0 && this.waiting.get(scope) === queue) this.waiting.delete(scope);
        return answer;
      }
    }
    if (queue.length === 0 && this.waiting.get(scope) === queue) this.waiting.delete(scope);
    return { kind: 'busy' };
  }

  private async tryReserve(address: string): Promise<Reservation> {
    const shared = await redisAnswerWithin(
      this.redis.verityAuthFailures(this.key(address), this.perMinute, WINDOW_MS, 'reserve'),
      this.timeoutMs,
    );
    if (shared !== null) {
      if (shared === 0) this.countLocally(address, 'pending', 1);
      return reservation(shared);
    }
    // This process' own count decides while Redis does not answer, checked and counted in one step too.
    const blocked = this.locallyBlockedFor(address);
    if (blocked > 0) return { kind: 'blocked', seconds: blocked };
    const entry = this.liveLocal(address);
    if (entry && entry.failures + entry.pending >= this.perMinute) return { kind: 'busy' };
    this.countLocally(address, 'pending', 1);
    return { kind: 'reserved' };
  }

  /** A reserved lookup ended: the key was found (no failure), or not (one failure). */
  async settle(address: string, found: boolean): Promise<void> {
    const entry = this.liveLocal(address);
    if (entry && entry.pending > 0) entry.pending -= 1;
    if (!found) this.countLocally(address, 'failures', 1);
    await redisAnswerWithin(
      this.redis.verityAuthFailures(this.key(address), this.perMinute, WINDOW_MS, found ? 'found' : 'unknown'),
      this.timeoutMs,
    );
    // One place is free (or, for a failure, the address may now be blocked): the first lookup waiting asks again.
    this.waiting.get(failureScope(address))?.[0]?.();
  }

  private liveLocal(address: string) {
    const entry = this.local.get(failureScope(address));
    return entry && entry.until > Date.now() ? entry : undefined;
  }

  private countLocally(address: string, counter: 'failures' | 'pending', by: number): void {
    const entry = this.liveLocal(address);
    if (entry) entry[counter] += by;
    else {
      const fresh = { failures: 0, pending: 0, until: Date.now() + WINDOW_MS };
      fresh[counter] = by;
      this.local.set(failureScope(address), fresh);
    }
    if (this.local.size > 50_000) this.local.clear();
  }

  async recordFailure(address: string): Promise<void> {
    this.countLocally(address, 'failures', 1);
    await redisAnswerWithin(
      this.redis.verityAuthFailures(this.key(address), this.perMinute, WINDOW_MS, 'fail'),
      this.timeoutMs,
    );
  }

  /**
   * The limit is part of the key: processes configured differently do not share (or exhaust) one count. `authfail2`:
   * a hash of two counters, where the first version kept one string (a process of each during a rolling update must
   * not meet the other's type).
   */
  private key(address: string): string {
    return `${this.prefix}:authfail2:${this.perMinute}:${failureScope(address)}`;
  }
}

function reservation(answer: number): Reservation {
  if (answer === 0) return { kind: 'reserved' };
  if (answer === LUA_BUSY) return { kind: 'busy' };
  return { kind: 'blocked', seconds: answer };
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
