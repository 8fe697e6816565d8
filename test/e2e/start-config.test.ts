import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import {
  clearRedisPrefix,
  createTestDatabase,
  TEST_REDIS_URL,
  TestDatabase,
  testQueuePrefix,
} from '../support/services';
import { DIST, freePort } from '../support/stack';

/**
 * `npm start` reads the apps' settings by their own rules before it starts anything. Before, an empty DATABASE_URL or
 * REDIS_URL (which every app refuses) was taken for unset, so the apps were given the default server's database; a
 * malformed one was reported as a server to start ("Postgres is not reachable at abc (getaddrinfo ENOTFOUND base)");
 * a value only the apps check (HOST, a timing) was found after the migrations ran; and one only the sandbox provider
 * reads (SANDBOX_MAX_EFFECTS) had it restarted in a loop, the rest of the stack up.
 */
describe('npm start: the apps settings', () => {
  let db: TestDatabase;
  let prefix = '';
  let ports: Record<string, string> = {};

  beforeAll(async () => {
    db = await createTestDatabase('startcfg');
    prefix = testQueuePrefix('startcfg');
    ports = {
      PORT: String(await freePort()),
      SANDBOX_PORT: String(await freePort()),
      DISPATCHER_METRICS_PORT: String(await freePort()),
      RECONCILER_METRICS_PORT: String(await freePort()),
    };
  });

  afterAll(async () => {
    await db?.drop().catch(() => undefined);
    await clearRedisPrefix(prefix).catch(() => undefined);
  });

  it.each([
    ['DATABASE_URL', '', 'DATABASE_URL: '],
    ['DATABASE_URL', 'abc', 'DATABASE_URL: must be a postgres:// URL'],
    ['REDIS_URL', '', 'REDIS_URL: '],
    ['REDIS_URL', 'abc', 'REDIS_URL: must be redis://, rediss:// or unix:///<socket path>'],
    ['HOST', '', 'HOST: '],
    ['CONNECTOR_TIMEOUT_MS', 'abc', 'CONNECTOR_TIMEOUT_MS: must be a whole number of milliseconds'],
    ['SANDBOX_MAX_EFFECTS', '-1', 'SANDBOX_MAX_EFFECTS: must be a whole number from 0 to 10000000'],
  ])('%s=%j is refused with one line naming it, nothing started', (variable, value, message) => {
    const result = spawnSync(process.execPath, [join(DIST, 'scripts', 'start.js')], {
      env: {
        ...process.env,
        NODE_ENV: 'test',
        NO_COLOR: '1',
        DATABASE_URL: db.url,
        REDIS_URL: TEST_REDIS_URL,
        QUEUE_PREFIX: prefix,
        ...ports,
        [variable]: value,
      },
      encoding: 'utf8',
      // Before, the sandbox provider's refusal left the rest of the stack running: SIGTERM ends it then.
      timeout: 30_000,
    });
    const output = `${result.stdout}${result.stderr}`;
    expect({
      status: result.status,
      refused: /invalid configuration: /.test(output) && output.includes(message),
    }).toEqual({
      status: 1,
      refused: true,
    });
    expect(output).not.toMatch(/Postgres:|running migrations|started \S+ \(pid/);
  });
});
