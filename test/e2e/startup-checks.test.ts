import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MIGRATIONS } from '@verity/persistence';
import { http } from '../support/http';
import { undoMigrationsFrom } from '../support/migration-steps';
import IORedis from 'ioredis';
import { JobProducer, QueueName } from '@verity/queues';
import {
  TEST_REDIS_URL,
  TestDatabase,
  clearRedisPrefix,
  createTestDatabase,
  testQueuePrefix,
} from '../support/services';
import { DIST, Stack, freePort, waitFor } from '../support/stack';

const ROOT = join(__dirname, '..', '..');

function run(entry: string, env: Record<string, string>): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(DIST, entry)], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

/** Every app refuses to start unless Redis has maxmemory-policy noeviction, and says so. */
describe('start-up checks', () => {
  let redis: ReturnType<typeof spawn>;
  let redisUrl = '';
  let dir = '';

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'verity-evicting-redis-'));
    const port = await freePort();
    redis = spawn(
      'redis-server',
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--dir',
        dir,
        '--maxmemory-policy',
        'allkeys-lru',
      ],
      { stdio: 'ignore' },
    );
    redisUrl = `redis://127.0.0.1:${port}`;
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      const ping = spawnSync('redis-cli', ['-p', String(port), 'ping'], { encoding: 'utf8' });
      if (ping.stdout.includes('PONG')) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error('private redis did not start');
  });

  afterAll(() => {
    redis?.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });

  it.each(['apps/api/src/main.js', 'apps/dispatcher/src/main.js', 'apps/reconciler/src/main.js'])(
    '%s exits with a message naming the required Redis policy when Redis may evict keys',
    async (entry) => {
      const result = await run(entry, { REDIS_URL: redisUrl, PORT: String(await freePort()), LOG_LEVEL: 'info' });
      expect(result.code).not.toBe(0);
      expect(result.output).toContain('noeviction');
      expect(result.output).toContain('allkeys-lru');
    },
  );

  // Until 2026-12-05 each exited 1 with the single line "Connection is closed.": neither Redis nor where it was sought
  // was named. It is still a failure to start (npm start, or an orchestrator's restart policy, starts it again).
  it.each(['apps/api/src/main.js', 'apps/dispatcher/src/main.js', 'apps/reconciler/src/main.js'])(
    '%s started while Redis cannot be reached exits 1 with one line naming Redis, where, and why',
    async (entry) => {
      const nobody = await freePort();
      const ports = { PORT: String(await freePort()), DISPATCHER_METRICS_PORT: '0', RECONCILER_METRICS_PORT: '0' };
      const result = await run(entry, { ...ports, REDIS_URL: `redis://:hunter2@127.0.0.1:${nobody}` });
      expect(result.code).toBe(1);
      const lines = result.output.trim().split('\n');
      expect(lines).toHaveLength(1);
      const line = JSON.parse(lines[0]) as { level: string; msg: string };
      expect(line.level).toBe('fatal');
      expect(line.msg).toContain(`Redis at redis://:***@127.0.0.1:${nobody} cannot be reached`);
      expect(line.msg).toContain('ECONNREFUSED');
      expect(line.msg).not.toContain('hunter2');
    },
  );

  // Until 2026-12-06 each printed Nest's own report instead: a colored "Unable to connect to the database. Retrying (1)"
  // line and the pg error's stack, twice (some 40 lines, none JSON), naming neither Postgres nor DATABASE_URL.
  it.each([
    ['apps/api/src/main.js', 'nobody listens', (port: number) => `postgres://verity:hunter2@127.0.0.1:${port}/verity`],
    [
      'apps/dispatcher/src/main.js',
      'nobody listens',
      (port: number) => `postgres://verity:hunter2@127.0.0.1:${port}/v`,
    ],
    [
      'apps/reconciler/src/main.js',
      'nobody listens',
      (port: number) => `postgres://verity:hunter2@127.0.0.1:${port}/v`,
    ],
    ['apps/dispatcher/src/main.js', 'no such database', () => 'postgres://postgres@127.0.0.1:5432/verity_nowhere_ops2'],
  ])(
    '%s started while Postgres cannot be used (%s) exits 1 with one line naming Postgres, where, and why',
    async (entry, _case, url) => {
      const nobody = await freePort();
      const ports = { PORT: String(await freePort()), DISPATCHER_METRICS_PORT: '0', RECONCILER_METRICS_PORT: '0' };
      const databaseUrl = url(nobody);
      const result = await run(entry, { ...ports, DATABASE_URL: databaseUrl });
      expect(result.code).toBe(1);
      const lines = result.output.trim().split('\n');
      expect(lines).toHaveLength(1);
      const line = JSON.parse(lines[0]) as { level: string; msg: string };
      expect(line.level).toBe('fatal');
      expect(line.msg).toContain(`Postgres at ${databaseUrl.replace(':hunter2@', ':***@')} `);
      expect(line.msg).toContain('DATABASE_URL');
      expect(line.msg).toMatch(/ECONNREFUSED|does not exist/);
      expect(line.msg).not.toContain('hunter2');
    },
  );

  // A password can also be a query parameter: the documented form for Redis on a Unix socket, and one pg reads too.
  // Until 2026-12-06 only the password of the authority was masked, and this one was printed as given.
  it.each([
    ['REDIS_URL', 'unix:///nonexistent/verity-redis.sock?db=2&password=hunter2', 'Redis at unix:///nonexistent'],
    ['DATABASE_URL', 'postgres://verity@127.0.0.1:1/verity?password=hunter2&sslmode=disable', 'Postgres at postgres:'],
  ])('%s with its password as a query parameter: the refusal masks it', async (variable, value, named) => {
    const ports = { DISPATCHER_METRICS_PORT: '0' };
    const result = await run('apps/dispatcher/src/main.js', { ...ports, [variable]: value });
    expect(result.code).toBe(1);
    expect(result.output).toContain(named);
    expect(result.output).toContain('password=***');
    expect(result.output).not.toContain('hunter2');
  });

  // Until 2026-12-06 a colored line of Nest's, then a fatal line that named neither variable ("listen EADDRINUSE: …");
  // a worker's metrics port already said which variable to change.
  it('the API whose PORT is taken exits 1 with one line naming PORT and HOST', async () => {
    const db = await createTestDatabase('port-taken');
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const { port } = taken.address() as AddressInfo;
    try {
      const result = await run('apps/api/src/main.js', { DATABASE_URL: db.url, PORT: String(port), HOST: '127.0.0.1' });
      expect(result.code).toBe(1);
      const lines = result.output.trim().split('\n');
      expect(lines).toHaveLength(1);
      const line = JSON.parse(lines[0]) as { level: string; msg: string };
      expect(line.level).toBe('fatal');
      expect(line.msg).toContain(`cannot listen on 127.0.0.1:${port} (PORT, HOST)`);
      expect(line.msg).toContain('EADDRINUSE');
    } finally {
      await new Promise((resolve) => taken.close(resolve));
      await db.drop();
    }
  });

  it('refuses an invalid configuration value, naming the variable', async () => {
    const result = await run('apps/dispatcher/src/main.js', { CONNECTOR_TIMEOUT_MS: 'soon' });
    expect(result.code).not.toBe(0);
    expect(result.output).toContain('CONNECTOR_TIMEOUT_MS');
  });

  // Until 2026-12-05 a misspelled variable was ignored without a word: this API started with Bull Board read-only.
  it('refuses a variable that can only be one of ours misspelled, naming it and the variable meant', async () => {
    const result = await run('apps/api/src/main.js', { PORT: String(await freePort()), bull_board_writable: 'true' });
    expect(result.code).not.toBe(0);
    expect(result.code).not.toBeNull();
    expect(result.output).toContain(
      'bull_board_writable: not a variable Verity reads; did you mean BULL_BOARD_WRITABLE?',
    );
  });

  // A name a keystroke from one of ours may be another program's in a shared env file (a Django service's SECRET_KEY):
  // named in a warning, never a refusal to start.
  it('starts beside another program’s variable that looks like one of ours, and names it in a warning', async () => {
    const db = await createTestDatabase('lookalike');
    try {
      const result = await run('apps/api/src/migrate.js', { DATABASE_URL: db.url, SECRET_KEY: 'django-insecure' });
      expect(result.output).toContain('SECRET_KEY: not a variable Verity reads, ignored; did you mean SECRETS_KEY?');
      expect(result.code).toBe(0);
    } finally {
      await db.drop();
    }
  });

  it.each([
    [
      'apps/reconciler/src/main.js',
      'SWEEP_INTERVAL_MS',
      '3000000000',
      'SWEEP_INTERVAL_MS: must be a whole number of milliseconds from 100 to 3600000 (100 ms to 1 h)',
    ],
    [
      'apps/api/src/main.js',
      'SSE_HEARTBEAT_MS',
      '1e10',
      'SSE_HEARTBEAT_MS: must be a whole number of milliseconds from 100 to 3600000 (100 ms to 1 h)',
    ],
    [
      'apps/dispatcher/src/main.js',
      'DISPATCH_LOCK_MS',
      '0',
      'DISPATCH_LOCK_MS: must be a whole number of milliseconds from 1000 to 2147483647 (1 s to 24.8 days)',
    ],
  ])(
    '%s refuses %s=%s (a timer that would overflow or spin), naming the range',
    async (entry, name, value, message) => {
      // Ports of its own, so that without the check it would start (and be killed by `run` after 30 s), not collide.
      const ports = { PORT: String(await freePort()), DISPATCHER_METRICS_PORT: '0', RECONCILER_METRICS_PORT: '0' };
      const result = await run(entry, { ...ports, [name]: value });
      expect(result.code).not.toBe(0);
      expect(result.code).not.toBeNull();
      expect(result.output).toContain(message);
    },
  );
});

/** `docker compose config` accepts docker-compose.yml (validated without an engine). */
describe('docker-compose.yml', () => {
  it('is accepted by docker compose config', () => {
    const plugin = spawnSync('docker', ['compose', 'version'], { encoding: 'utf8' });
    const [command, args] =
      plugin.status === 0
        ? ['docker', ['compose', 'config', '--quiet']]
        : ['docker-compose', ['-f', 'docker-compose.yml', 'config', '--quiet']];
    const result = spawnSync(command, args, { cwd: ROOT, encoding: 'utf8' });
    if (result.error)
      throw new Error(`${command} is not installed (.ci/run installs docker-compose): ${result.error.message}`);
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
  });
});

/**
 * A worker started before the migrations ran (a deployment that starts the apps before its migration step, or a
 * rollout of new code onto the old schema) said ready: its /health/ready asked only whether Postgres answered, and
 * every job it took failed on a table or column that was not there yet.
 */
describe('a worker (or the API) on a database whose schema is not migrated', () => {
  let stack: Stack;
  let db: TestDatabase;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'unmigrated', dispatchers: 0, reconcilers: 0 });
    db = await createTestDatabase('unmigrated');
  });
  afterAll(async () => {
    await db?.drop();
    await stack?.stop();
  });

  it('is not ready (503, naming the schema) until the migrations have run, then is', async () => {
    const upgrade = await undoMigrationsFrom(db, MIGRATIONS[MIGRATIONS.length - 1]);
    const env = { DATABASE_URL: db.url, QUEUE_PREFIX: testQueuePrefix('unmigrated') };
    const workers = [await stack.startApp('dispatcher', env), await stack.startApp('reconciler', env)];
    // The API too, started without RUN_MIGRATIONS (as where a migration step of its own runs them).
    const apiUrl = await stack.startApi({ ...env, SEED_DEMO: 'false' });
    const urls = [...workers.map((app) => app.opsUrl!), apiUrl];
    for (const url of urls) {
      // An answer of 503 is an error like any other: problem+json (RFC 9457), with the checks as a member of it.
      const ready = await http(url, 'GET', '/health/ready');
      expect([ready.status, ready.headers.get('content-type'), ready.body]).toEqual([
        503,
        expect.stringMatching(/^application\/problem\+json/),
        {
          type: 'https://verity.dev/problems/not-ready',
          title: 'Not ready',
          status: 503,
          detail: 'not ready: schema is down',
          checks: { postgres: 'up', redis: 'up', schema: 'down' },
          ...(url === apiUrl ? { instance: '/health/ready' } : {}),
        },
      ]);
    }
    await upgrade();
    for (const url of urls) {
      const ready = await waitFor(
        () => http(url, 'GET', '/health/ready'),
        (r) => r.status === 200,
      );
      expect(ready.body).toEqual({ status: 'ok', checks: { postgres: 'up', redis: 'up', schema: 'up' } });
    }
  }, 60_000);

  it('a reconciler waits for the migrations without a warning per sweep: one line when it starts waiting, one when it ends', async () => {
    const bare = await createTestDatabase('unmigrated-reconciler');
    try {
      const upgrade = await undoMigrationsFrom(bare, MIGRATIONS[0]);
      const prefix = testQueuePrefix('unmigrated-reconciler');
      const reconciler = await stack.startApp('reconciler', { DATABASE_URL: bare.url, QUEUE_PREFIX: prefix });
      const redis = new IORedis(TEST_REDIS_URL, { maxRetriesPerRequest: 1 });
      try {
        const sweeps = new JobProducer(redis, prefix).queue(QueueName.SWEEP, 0);
        // Twelve sweeps of the schedule (every 500 ms here), and so at least two overdue checks (every 2.5 s), came
        // and went on the unmigrated database.
        await waitFor(
          async () => (await sweeps.getJobScheduler('sweep'))?.iterationCount ?? 0,
          (count) => count >= 12,
          30_000,
          100,
        );
        const log = () => reconciler.output.join('');
        const waiting = /sweeps and webhook passes wait until the migrations have run/g;
        expect(log().match(waiting)).toHaveLength(1);
        expect(log()).not.toMatch(/does not exist|the overdue sweep failed/);
        expect(await sweeps.getFailedCount()).toBe(0);

        await upgrade();
        await waitFor(
          async () =>
            (
              (await bare.dataSource.query(
                `SELECT count(*)::int AS n FROM sweep_log WHERE finished_at IS NOT NULL`,
              )) as { n: number }[]
            )[0].n,
          (n) => n >= 1,
        );
        expect(log().match(/the database schema is migrated: sweeps and webhook passes run/g)).toHaveLength(1);
        expect(log().match(waiting)).toHaveLength(1);
      } finally {
        redis.disconnect();
        await stack.kill(reconciler, 'SIGTERM');
        await clearRedisPrefix(prefix);
      }
    } finally {
      await bare.drop();
    }
  }, 90_000);
});
