import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { createRedis } from '../../libs/platform/src/redis';
import { PrivateService, freePort, startPrivatePostgres, startPrivateRedis } from '../../scripts/local-services';

/**
 * The private servers the benchmark and the chaos run start can be reached through their Unix-domain sockets
 * (`socketUrl`: what `npm run bench -- --unix-sockets` hands the apps as DATABASE_URL and REDIS_URL), in the URL forms
 * docs/operations.md documents for the apps.
 */
describe('private Postgres and Redis over their Unix sockets', () => {
  const dirs: string[] = [];
  const services: PrivateService[] = [];
  const scratch = (prefix: string) => {
    const dir = mkdtempSync(join(tmpdir(), prefix));
    dirs.push(dir);
    return dir;
  };
  afterAll(async () => {
    for (const service of services) await service.stop().catch(() => undefined);
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it('Redis: no socket unless asked (not every filesystem can hold one)', async () => {
    const redis = await startPrivateRedis({ dir: scratch('verity-redistcp-'), port: await freePort() });
    services.push(redis);
    expect(redis.socketUrl).toBeNull();
  });

  it('Postgres: socketUrl connects with no server address (a socket session, not TCP)', async () => {
    const postgres = await startPrivatePostgres({ dir: scratch('verity-pgsock-'), port: await freePort() });
    services.push(postgres);
    expect(postgres.socketUrl).toMatch(/^postgres:\/\/postgres@localhost:\d+\/verity\?host=%2F/);
    const client = new Client({ connectionString: postgres.socketUrl! });
    await client.connect();
    try {
      const { rows } = await client.query<{ address: string | null; db: string }>(
        'SELECT inet_server_addr()::text AS address, current_database() AS db',
      );
      expect(rows[0]).toEqual({ address: null, db: 'verity' });
    } finally {
      await client.end();
    }
    // The TCP URL still reaches the same server, with an address.
    const tcp = new Client({ connectionString: postgres.url });
    await tcp.connect();
    try {
      expect((await tcp.query<{ address: string }>('SELECT inet_server_addr()::text AS address')).rows[0].address).toBe(
        '127.0.0.1/32',
      );
    } finally {
      await tcp.end();
    }
  });

  it('Redis: socketUrl (unix:///…) answers through the socket the server was told to open', async () => {
    const redis = await startPrivateRedis({
      dir: scratch('verity-redissock-'),
      port: await freePort(),
      unixSocket: true,
    });
    services.push(redis);
    expect(redis.socketUrl).toMatch(/^unix:\/\/\/.*redis\.sock$/);
    const client = createRedis(redis.socketUrl!, 'producer', 'socket-test', true);
    try {
      await client.connect();
      expect(await client.ping()).toBe('PONG');
      const [, socket] = (await client.config('GET', 'unixsocket')) as string[];
      expect(`unix://${socket}`).toBe(redis.socketUrl);
      // This connection is the socket's: Redis lists a Unix client with the socket as its address.
      const clients = String(await client.client('LIST')).split('\n');
      expect(clients.find((line) => line.includes('name=socket-test'))).toContain(`addr=${socket}`);
    } finally {
      client.disconnect();
    }
    // SIGKILLed, its socket file is left behind; a restart binds it again.
    await redis.kill('SIGKILL');
    await redis.restart();
    const again = createRedis(redis.socketUrl!, 'producer', 'socket-test-again', true);
    try {
      await again.connect();
      expect(await again.ping()).toBe('PONG');
    } finally {
      again.disconnect();
    }
  });
});
