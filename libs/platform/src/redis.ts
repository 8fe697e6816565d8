import IORedis, { Cluster, ClusterOptions, Redis, RedisOptions } from 'ioredis';

/** A connection to Redis: one server (REDIS_URL) or a Redis Cluster (REDIS_CLUSTER_NODES). */
export type RedisClient = Redis | Cluster;

/** Where Redis is: the two variables of the config that say it. */
export interface RedisTarget {
  REDIS_URL: string;
  REDIS_CLUSTER_NODES?: string[] | undefined;
}

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
export function createRedis(url: string, role: 'producer' | 'worker', name: string, lazy = false): Redis {
  const redis = new IORedis(redisTarget(url), { ...roleOptions(role, name), ...(lazy ? { lazyConnect: true } : {}) });
  // An unhandled 'error' event would crash the process on every reconnect attempt.
  redis.on('error', () => undefined);
  return redis;
}

/**
 * The same connection roles on whichever Redis the config names. A cluster client keeps the role's rules: a producer's
 * has no offline queue (an enqueue fails at once while the cluster is away), a worker's retries forever. `lazy`: no
 * connection until the first command or connect() (a template BullMQ duplicates for each worker).
 */
export function createRedisClient(
  target: RedisTarget,
  role: 'producer' | 'worker',
  name: string,
  lazy = false,
): RedisClient {
  if (!target.REDIS_CLUSTER_NODES) return createRedis(target.REDIS_URL, role, name, lazy);
  const { nodes, credentials } = clusterNodes(target.REDIS_CLUSTER_NODES);
  const options: ClusterOptions = {
    lazyConnect: lazy,
    enableReadyCheck: true,
    redisOptions: { ...roleOptions(role, name), ...credentials },
    ...(role === 'producer' ? { enableOfflineQueue: false } : {}),
  };
  const cluster = new Cluster(nodes, options);
  cluster.on('error', () => undefined);
  return cluster;
}

/**
 * How long a producer's command waits for its reply. A Redis that stops answering (frozen, cut off) leaves the
 * connection 'ready', so failing fast while it is away did not cover it: an intake request waited on its enqueue
 * forever instead of leaving the job to the sweeper. Producer commands are short (no blocking reads).
 */
export const PRODUCER_COMMAND_TIMEOUT_MS = 2000;

function roleOptions(role: 'producer' | 'worker', name: string): RedisOptions {
  return role === 'worker'
    ? { maxRetriesPerRequest: null, enableReadyCheck: true, connectionName: name }
    : {
        maxRetriesPerRequest: 1,
        enableOfflineQueue: false,
        connectionName: name,
        connectTimeout: 2000,
        commandTimeout: PRODUCER_COMMAND_TIMEOUT_MS,
      };
}

/** REDIS_CLUSTER_NODES as ioredis wants it; credentials and TLS come from the first entry that is a URL. */
export function clusterNodes(entries: readonly string[]): {
  nodes: { host: string; port: number }[];
  credentials: Pick<RedisOptions, 'username' | 'password' | 'tls'>;
} {
  let credentials: Pick<RedisOptions, 'username' | 'password' | 'tls'> | null = null;
  const nodes = entries.map((entry) => {
    const url = new URL(entry.includes('://') ? entry : `redis://${entry}`);
    if (!credentials && entry.includes('://')) {
      credentials = {
        ...(url.username ? { username: decodeURIComponent(url.username) } : {}),
        ...(url.password ? { password: decodeURIComponent(url.password) } : {}),
        ...(url.protocol === 'rediss:' ? { tls: {} } : {}),
      };
    }
    return { host: url.hostname, port: Number(url.port || 6379) };
  });
  return { nodes, credentials: credentials ?? {} };
}

/**
 * BullMQ loses jobs silently when Redis evicts keys: refuse to run unless eviction is off (on every master of a
 * cluster: each holds a share of the queues).
 */
export async function assertNoEviction(target: RedisTarget | string): Promise<void> {
  const resolved = typeof target === 'string' ? { REDIS_URL: target } : target;
  if (!resolved.REDIS_CLUSTER_NODES) return assertServerNoEviction(resolved.REDIS_URL);
  const cluster = createRedisClient(resolved, 'worker', 'verity-policy-check', true) as Cluster;
  try {
    await withTimeout(cluster.connect(), 10_000, 'the Redis Cluster (REDIS_CLUSTER_NODES) did not become ready');
    for (const node of cluster.nodes('master')) {
      await checkPolicy(node, `Redis Cluster node ${node.options.host}:${node.options.port}`);
    }
  } finally {
    cluster.disconnect();
  }
}

/**
 * The first thing an app asks Redis, so it is also where an app started without a Redis it can reach stops: with one
 * line naming Redis, where it was sought and why it failed (ioredis' own rejection says only "Connection is closed.").
 * The app exits 1, and whatever supervises it (`npm start`, an orchestrator's restart policy) starts it again.
 */
async function assertServerNoEviction(url: string): Promise<void> {
  const redis = new IORedis(redisTarget(url), {
    maxRetriesPerRequest: 1,
    lazyConnect: true,
    connectTimeout: 3000,
    retryStrategy: () => null,
  });
  let lastError: Error | undefined;
  redis.on('error', (error: Error) => (lastError = error));
  try {
    try {
      await redis.connect();
    } catch (error) {
      const cause = lastError ?? (error as Error);
      throw new Error(
        `Redis at ${redactUrl(url)} cannot be reached (${cause.message}): the app needs it to start; start Redis or ` +
          'correct REDIS_URL',
      );
    }
    await checkPolicy(redis, `Redis at ${redactUrl(url)}`);
  } finally {
    redis.disconnect();
  }
}

async function checkPolicy(redis: Redis, where: string): Promise<void> {
  const reply = (await redis.config('GET', 'maxmemory-policy')) as string[];
  const policy = reply[1];
  if (policy !== 'noeviction') {
    throw new RedisPolicyError(
      `${where} has maxmemory-policy "${policy}"; Verity requires "noeviction" ` +
        `(run: redis-cli config set maxmemory-policy noeviction, or set it in redis.conf)`,
    );
  }
}

async function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(message)), ms))),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A key's hash tag as Redis Cluster finds it: the text between the first `{` and the first `}` after it, when not
 * empty — then that text alone decides the key's slot (`end`: the index of that `}`). null: the whole key decides, so
 * two keys that share only a prefix may sit on two nodes.
 */
export function redisHashTag(key: string): { tag: string; end: number } | null {
  const open = key.indexOf('{');
  if (open < 0) return null;
  const close = key.indexOf('}', open + 1);
  if (close <= open + 1) return null;
  return { tag: key.slice(open + 1, close), end: close };
}

export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    // A password may also be a query parameter (a Unix socket's only place for one; pg reads it there too).
    if (parsed.searchParams.has('password')) parsed.searchParams.set('password', '***');
    return parsed.toString();
  } catch {
    return '(unparseable url)';
  }
}

const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

const OFFLINE_REFUSAL = "Stream isn't writeable and enableOfflineQueue options is false";

/** ioredis' Cluster client refusing a command because it has no usable connection to the cluster now. */
const CLUSTER_UNREACHABLE = new Set([
  "Cluster isn't ready and enableOfflineQueue options is false",
  'None of startup nodes is available',
  'Failed to refresh slots cache.',
  'Cluster is disconnected.',
]);

/** What ioredis' Cluster client rejects a command with once it gave up redirecting or retrying it. */
const CLUSTER_GAVE_UP = 'Too many Cluster redirections. Last error: ';

/**
 * The error a Redis Cluster client's rejection is about: ioredis retries a command that met a closed connection, a
 * cluster that is down (CLUSTERDOWN: a slot no node serves, e.g. its master killed) or a redirection (MOVED, ASK,
 * TRYAGAIN; a node still naming the killed master as the slot's owner), and after as many tries as it takes rejects it
 * with the last error written into its message (`Too many Cluster redirections. Last error: Error: Connection is
 * closed.`): that last error's message (its class name taken off), or the message itself when it is no such rejection.
 */
function lastClusterError(message: string): string {
  if (!message.startsWith(CLUSTER_GAVE_UP)) return message;
  return message.slice(CLUSTER_GAVE_UP.length).replace(/^[A-Za-z]*Error: /, '');
}

/**
 * Whether an error says only that Redis cannot be reached now (refused, reset, closed; on a cluster also a slot no
 * node serves, or a client with no node to ask), not what went wrong in it.
 */
export function isRedisUnreachable(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  if (typeof code === 'string' && UNREACHABLE_CODES.has(code)) return true;
  if (typeof message !== 'string') return false;
  const last = lastClusterError(message);
  // ioredis' refusal of a command while its connection is down and it queues none (as the producer's clients do).
  if (last === 'Connection is closed.' || last === OFFLINE_REFUSAL || CLUSTER_UNREACHABLE.has(last)) return true;
  // A cluster that is down (a node gone and its slots with it).
  if (/^CLUSTERDOWN\b/.test(last)) return true;
  if (last === message) return false;
  // Given up on: still redirected after as many tries (the slot's owner unreachable, or moving), or a connection refused
  // to a node (in words only).
  if (/^(MOVED|ASK|TRYAGAIN)\b/.test(last)) return true;
  return /^(connect|read|write) [A-Z]+\b/.test(last) && UNREACHABLE_CODES.has(last.split(' ')[1]);
}

/** ioredis' rejection of a command that got no reply within its `commandTimeout` (the producer's clients set one). */
const COMMAND_TIMED_OUT = 'Command timed out';

/**
 * Whether an error says only that Redis did not answer in time: frozen, overloaded or cut off, the connection still
 * 'ready'. Like an unreachable Redis it says nothing about the request; unlike one it is not a refusal, so a write
 * that timed out may still have been applied: only a read may take it as "not there now".
 */
export function isRedisCommandTimeout(error: unknown): boolean {
  const message = (error as { message?: unknown } | null)?.message;
  return typeof message === 'string' && lastClusterError(message) === COMMAND_TIMED_OUT;
}
