import { ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { ConfigError, loadConfig } from './config';
import { assertNoEviction, createRedis, redisHashTag, redisTarget } from './redis';

describe('redisHashTag: what decides the slot of a key on a Redis Cluster, read as Redis reads it', () => {
  it.each([
    ['{verity}:ratelimit:k', { tag: 'verity', end: 7 }],
    ['acme{verity}q', { tag: 'verity', end: 11 }],
    ['{a}{b}', { tag: 'a', end: 2 }],
    ['x{a{b}c', { tag: 'a{b', end: 5 }],
    ['{}{verity}', null],
    ['{verity', null],
    ['verity}', null],
    ['verity', null],
  ])('%s', (key, expected) => expect(redisHashTag(key)).toEqual(expected));

  it('is what the configuration asks of a sharded or clustered QUEUE_PREFIX', () => {
    const env = { DATABASE_URL: 'postgres://localhost/x', REDIS_URL: 'redis://localhost:6379', QUEUE_SHARDS: '2' };
    expect(() => loadConfig({ ...env, QUEUE_PREFIX: '{}{verity}' })).toThrow(ConfigError);
    expect(loadConfig({ ...env, QUEUE_PREFIX: 'x{verity}' }).QUEUE_PREFIX).toBe('x{verity}');
  });
});

describe('REDIS_URL', () => {
  it('takes redis://, rediss:// and a Unix socket as unix:///<path>', () => {
    expect(loadConfig({ REDIS_URL: 'unix:///run/redis/redis.sock' }).REDIS_URL).toBe('unix:///run/redis/redis.sock');
    expect(loadConfig({ REDIS_URL: 'rediss://cache.internal:6380/1' }).REDIS_URL).toBe(
      'rediss://cache.internal:6380/1',
    );
    expect(() => loadConfig({ REDIS_URL: 'http://127.0.0.1:6379' })).toThrow(ConfigError);
    expect(() => loadConfig({ REDIS_URL: 'unix:relative/redis.sock' })).toThrow('REDIS_URL');
  });

  it('hands ioredis a socket path (with its options) and a TCP URL unchanged', () => {
    expect(redisTarget('unix:///run/redis/redis.sock')).toBe('/run/redis/redis.sock');
    expect(redisTarget('unix:///run/my%20redis/redis.sock?db=2')).toBe('/run/my redis/redis.sock?db=2');
    expect(redisTarget('redis://127.0.0.1:6379/3')).toBe('redis://127.0.0.1:6379/3');
  });
});

/** A Redis of the test's own that listens only on a Unix socket (the shared one listens on TCP only). */
describe('Redis over a Unix socket (real redis-server)', () => {
  let dir: string;
  let server: ChildProcess;
  let url: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'verity-redis-sock-'));
    const socket = join(dir, 'redis.sock');
    url = `unix://${socket}`;
    server = spawn(
      'redis-server',
      [
        '--port',
        '0',
        '--unixsocket',
        socket,
        '--unixsocketperm',
        '700',
        '--dir',
        dir,
        '--save',
        '',
        '--appendonly',
        'no',
      ],
      { stdio: 'ignore' },
    );
    server.on('error', () => undefined);
    // Listening once the socket file exists (redis-server creates it when it accepts connections).
    const deadline = Date.now() + 10_000;
    while (!existsSync(socket)) {
      if (Date.now() > deadline || server.exitCode !== null) throw new Error('redis-server did not open its socket');
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  });

  afterAll(() => {
    server?.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });

  it('the apps connect through the socket: the producer connection, the eviction check, a BullMQ queue', async () => {
    const producer = createRedis(url, 'producer', 'verity-test-producer');
    try {
      await new Promise((resolve) => producer.once('ready', resolve));
      // A Unix-socket client's address is the socket path, not host:port.
      expect(await producer.client('INFO')).toMatch(new RegExp(`addr=${join(dir, 'redis.sock')}:0`));

      await producer.config('SET', 'maxmemory-policy', 'noeviction');
      await expect(assertNoEviction(url)).resolves.toBeUndefined();

      const queue = new Queue('socket-check', { connection: { url: redisTarget(url) }, prefix: '{vt-sock}' });
      try {
        await queue.add('ping', { n: 1 }, { jobId: 'one' });
        expect(await queue.getJobCounts('waiting')).toEqual({ waiting: 1 });
      } finally {
        await queue.close();
      }
    } finally {
      producer.disconnect();
    }
  });
});
