import { randomBytes } from 'node:crypto';
import { Client } from 'pg';
import IORedis from 'ioredis';
import { DataSource } from 'typeorm';
import { createDataSource, runMigrationsLocked } from '@verity/persistence';

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

/** Each test file gets its own database (migrated), so files run in parallel and leave nothing behind. */
export async function createTestDatabase(label = 't'): Promise<TestDatabase> {
  const name = `verity_${label
    .replace(/[^a-z0-9]/gi, '')
    .toLowerCase()
    .slice(0, 20)}_${randomBytes(4).toString('hex')}`;
  const admin = new Client({ connectionString: ADMIN_DATABASE_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = withDatabase(ADMIN_DATABASE_URL, name);
  const dataSource = createDataSource(url, 20);
  await dataSource.initialize();
  await runMigrationsLocked(dataSource);
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
    redis.disconnect();
  }
}
