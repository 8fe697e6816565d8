import { createHash, randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'pg';
import IORedis from 'ioredis';
import { DataSource } from 'typeorm';
// The modules themselves, not libs/persistence's index: that is Nest and the platform's index too (zod, pino, …), ~0.3 s
// of CPU for each test file that loads it, and most load nothing else of them.
import { createDataSource, runMigrationsLocked } from '../../libs/persistence/src/data-source';
import { MIGRATIONS } from '../../libs/persistence/src/migrations';

export const ADMIN_DATABASE_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
export const TEST_REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

export interface TestDatabase {
  url: string;
  name: string;
  dataSource: DataSource;
  drop(): Promise<void>;
}

/**
 * The name of a database that holds exactly this code's migrations, run: a hash of the migrations' list and of every
 * file of their folder (what they run is in their files — most hold only statements given to `sqlMigration`, whose
 * `up` is one function for all — and none imports from outside it), so a migration added or edited, even under the
 * same name, gets a template of its own and no test ever starts from a stale schema. From test/support (ts-jest) the
 * folder is the sources; from dist/test/support (the built fuzz runner) the compiled files.
 */
export function templateName(
  folder = join(__dirname, '..', '..', 'libs', 'persistence', 'src', 'migrations'),
  names: readonly string[] = MIGRATIONS.map((m) => m.name),
): string {
  const hash = createHash('sha256').update(names.join('\n'));
  for (const file of readdirSync(folder).sort()) {
    if (/\.spec\.|\.map$/.test(file)) continue;
    hash.update(`\n${file}\n`).update(readFileSync(join(folder, file)));
  }
  return `verity_template_${hash.digest('hex').slice(0, 16)}`;
}

let template: Promise<string> | undefined;

/**
 * A migrated database every test database is copied from (`CREATE DATABASE … TEMPLATE`), made once per machine and
 * migration set: running the 30-odd migrations for each of some 300 test databases was minutes of every CI run. Built
 * under a scratch name and renamed when complete (a run killed half-way leaves no half-migrated template), under an
 * advisory lock (jest's workers and other checkouts on the machine build it once), and closed to connections: a copy
 * fails while anyone is connected to its source.
 */
function migratedTemplate(): Promise<string> {
  template ??= (async () => {
    const name = templateName();
    const admin = new Client({ connectionString: ADMIN_DATABASE_URL });
    await admin.connect();
    try {
      await admin.query(`SELECT pg_advisory_lock(hashtext('verity test template'))`);
      const found = await admin.query(`SELECT 1 FROM pg_database WHERE datname = $1`, [name]);
      if (found.rowCount === 0) {
        const building = `${name}_${randomBytes(4).toString('hex')}`;
        await admin.query(`CREATE DATABASE ${building}`);
        // Two connections: the migration lock's and the migrations'.
        const dataSource = createDataSource(withDatabase(ADMIN_DATABASE_URL, building), 2);
        try {
          await dataSource.initialize();
          await runMigrationsLocked(dataSource);
        } catch (error) {
          if (dataSource.isInitialized) await dataSource.destroy();
          await admin.query(`DROP DATABASE IF EXISTS ${building} WITH (FORCE)`);
          throw error;
        }
        await dataSource.destroy();
        await admin.query(`ALTER DATABASE ${building} RENAME TO ${name}`);
        await admin.query(`ALTER DATABASE ${name} WITH ALLOW_CONNECTIONS false`);
      }
    } catch (error) {
      template = undefined;
      throw error;
    } finally {
      await admin.end();
    }
    return name;
  })();
  return template;
}

/**
 * Each test file gets its own database (migrated), so files run in parallel and leave nothing behind. With
 * `{ migrated: false }` an empty one, as a first deployment's migration step finds it.
 */
export async function createTestDatabase(
  label = 't',
  { migrated = true }: { migrated?: boolean } = {},
): Promise<TestDatabase> {
  const name = `verity_${label
    .replace(/[^a-z0-9]/gi, '')
    .toLowerCase()
    .slice(0, 20)}_${randomBytes(4).toString('hex')}`;
  const source = migrated ? await migratedTemplate() : null;
  const admin = new Client({ connectionString: ADMIN_DATABASE_URL });
  await admin.connect();
  try {
    await admin.query(source === null ? `CREATE DATABASE ${name}` : `CREATE DATABASE ${name} TEMPLATE ${source}`);
  } finally {
    await admin.end();
  }
  const url = withDatabase(ADMIN_DATABASE_URL, name);
  const dataSource = createDataSource(url, 20);
  await dataSource.initialize();
  return {
    url,
    name,
    dataSource,
    async drop() {
      if (dataSource.isInitialized) await dataSource.destroy();
      const c = new Client({ connectionString: ADMIN_DATABASE_URL });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}

/** A Redis key prefix of the test's own (hash-tagged like production's), removed afterwards. */
export function testQueuePrefix(label = 't'): string {
  return `{vt-${label}-${randomBytes(4).toString('hex')}}`;
}

export async function clearRedisPrefix(prefix: string): Promise<void> {
  const redis = new IORedis(TEST_REDIS_URL, { maxRetriesPerRequest: 1 });
  try {
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length) await redis.del(...keys);
    } while (cursor !== '0');
  } finally {
    await closeRedis(redis);
  }
}

/**
 * Disconnects `redis` and resolves once its socket is closed: `disconnect()` returns while the socket is still open
 * (and ioredis keeps a timer to destroy it), so a test file that only called it ended with both still open.
 */
export async function closeRedis(redis: IORedis): Promise<void> {
  // Only a connection with a socket ends with 'end' after disconnect(); one still connecting or waiting to reconnect
  // is closed by disconnect() itself.
  const ended =
    redis.status === 'connect' || redis.status === 'ready'
      ? new Promise((resolve) => redis.once('end', resolve))
      : undefined;
  redis.disconnect();
  await ended;
}
