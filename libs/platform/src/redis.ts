import IORedis, { Redis, RedisOptions } from 'ioredis';

export class RedisPolicyError extends Error {
  override readonly name = 'RedisPolicyError';
}

/**
 * What ioredis (and BullMQ's `connection.url`) is given for REDIS_URL. `redis://` and `rediss://` pass unchanged; a
 * Unix socket, for a Redis on the same host (no TCP stack, one fewer copy per command), is written as a URL too —
 * `unix:///run/redis/redis.sock` (optionally `?db=2&password=…`) — and handed over as the path form ioredis reads
 * (`/run/redis/redis.sock?db=2`), since ioredis takes a `unix:` URL's path only by accident of its parser.
 */
export function redisTarget(url: string): string {
  const parsed = new URL(url);
  if (parsed.protocol !== 'unix:') return url;
  const path = decodeURIComponent(parsed.pathname);
  if (!path.startsWith('/')) throw new Error(`REDIS_URL ${url}: a unix: URL needs an absolute socket path`);
  return `${path}${parsed.search}`;
}

/**
 * Workers' blocking connections need maxRetriesPerRequest null (BullMQ's rule); producers fail fast instead of
 * queueing commands while Redis is away, because the enqueue is owed by Postgres (the sweeper), not by memory.
 */
export function createRedis(url: string, role: 'producer' | 'worker', name: string): Redis {
  const options: RedisOptions =
    role === 'worker'
      ? { maxRetriesPerRequest: null, enableReadyCheck: true, connectionName: name }
      : { maxRetriesPerRequest: 1, enableOfflineQueue: false, connectionName: name, connectTimeout: 2000 };
  const redis = new IORedis(redisTarget(url), options);
  // An unhandled 'error' event would crash the process on every reconnect attempt.
  redis.on('error', () => undefined);
  return redis;
}

/** BullMQ loses jobs silently when Redis evicts keys: refuse to run unless eviction is off. */
export async function assertNoEviction(url: string): Promise<void> {
  const redis = new IORedis(redisTarget(url), { maxRetriesPerRequest: 1, lazyConnect: true, connectTimeout: 3000 });
  redis.on('error', () => undefined);
  try {
    await redis.connect();
    const reply = (await redis.config('GET', 'maxmemory-policy')) as string[];
    const policy = reply[1];
    if (policy !== 'noeviction') {
      throw new RedisPolicyError(
        `Redis at ${redactUrl(url)} has maxmemory-policy "${policy}"; Verity requires "noeviction" ` +
          `(run: redis-cli config set maxmemory-policy noeviction, or set it in redis.conf)`,
      );
    }
  } finally {
    redis.disconnect();
  }
}

export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return '(unparseable url)';
  }
}
