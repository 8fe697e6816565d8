import { readFileSync, statSync } from 'node:fs';
import { Client } from 'pg';
import { Stack, freePort } from '../support/stack';
import { StallablePostgres } from '../support/stallable-postgres';
import { testQueuePrefix } from '../support/services';

/**
 * An app's start opens no Postgres session of its own beside its pool: the pool's first connection is the check that
 * Postgres can be used (a failure is still the one fatal line naming DATABASE_URL: startup-checks.test.ts). Until
 * 2026-12-06 each start first opened and ended a session of its own (one more connection per start, and an end with no
 * bound against a server that accepted the session and then stopped answering).
 */
describe('start-up database sessions', () => {
  let stack: Stack;
  let pg: StallablePostgres;
  let admin: Client;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'startsess', dispatchers: 0, reconcilers: 0 });
    // A private server whose log says when a session ends, and of which database (each app has its own).
    pg = await StallablePostgres.start('startsess-pg');
    admin = new Client({ connectionString: pg.url });
    await admin.connect();
    await admin.query('ALTER SYSTEM SET log_disconnections = on');
    await admin.query('SELECT pg_reload_conf()');
  }, 60_000);
  afterAll(async () => {
    await admin?.end();
    await pg?.stop();
    await stack?.stop();
  });

  /** The sessions of `database` that ended since `from` (a byte offset of the server's log). */
  function endedSessions(database: string, from: number): string[] {
    return readFileSync(pg.service.logFile)
      .subarray(from)
      .toString()
      .split('\n')
      .filter((line) => line.includes('disconnection:') && line.includes(`database=${database} `));
  }

  it.each(['dispatcher', 'reconciler', 'api'] as const)(
    '%s: no session is opened and ended before the app is up',
    async (name) => {
      const database = `startsess_${name}`;
      await admin.query(`CREATE DATABASE ${database}`);
      const from = statSync(pg.service.logFile).size;
      const url = new URL(pg.url);
      url.pathname = `/${database}`;
      const env = { DATABASE_URL: url.toString(), QUEUE_PREFIX: testQueuePrefix(`startsess-${name}`) };
      const app = await stack.startApp(
        name,
        name === 'api'
          ? { ...env, PORT: String(await freePort()), HOST: '127.0.0.1', RUN_MIGRATIONS: 'false', SEED_DEMO: 'false' }
          : env,
      );
      expect(endedSessions(database, from)).toEqual([]);
      app.child.kill('SIGTERM');
      await app.exited;
    },
    60_000,
  );
});
