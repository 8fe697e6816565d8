import { Client, ClientConfig } from 'pg';
import { DataSource, DataSourceOptions } from 'typeorm';
import { ENTITIES } from './entities';
import { MIGRATIONS } from './migrations';

/**
 * A pg client that can never crash the process with an unheard 'error' event. pg emits 'error' on a client whose
 * server goes away (a Postgres crash or restart sends FATAL to idle sessions) and Node throws an 'error' event nobody
 * listens to. The pool listens while a client is idle and TypeORM while a query runner holds it, but a client between
 * those hands (released with an error, being ended) has no listener, and a dispatcher died of exactly that in a chaos
 * run. The error is not lost: queries in flight are rejected with it, and the pool drops the broken client.
 */
export class ResilientPgClient extends Client {
  constructor(config?: string | ClientConfig) {
    super(config);
    this.on('error', () => undefined);
  }
}

export function dataSourceOptions(url: string, poolSize = 10): DataSourceOptions {
  return {
    type: 'postgres',
    url,
    entities: ENTITIES,
    migrations: MIGRATIONS,
    // Never synchronize: the schema changes only through reviewed migrations.
    synchronize: false,
    migrationsRun: false,
    logging: false,
    extra: { max: poolSize, connectionTimeoutMillis: 5000, Client: ResilientPgClient },
  };
}

export function createDataSource(url: string, poolSize = 10): DataSource {
  return new DataSource(dataSourceOptions(url, poolSize));
}

const MIGRATION_LOCK = 727_001;

export const MIGRATION_SQL = {
  lock: 'SELECT pg_advisory_lock($1)',
  unlock: 'SELECT pg_advisory_unlock($1)',
} as const;

/** Two replicas starting at once must not both migrate: the first takes the advisory lock, the other waits. */
export async function runMigrationsLocked(dataSource: DataSource): Promise<string[]> {
  const runner = dataSource.createQueryRunner();
  await runner.connect();
  try {
    await runner.query(MIGRATION_SQL.lock, [MIGRATION_LOCK]);
    const applied = await dataSource.runMigrations({ transaction: 'each' });
    return applied.map((m) => m.name);
  } finally {
    await runner.query(MIGRATION_SQL.unlock, [MIGRATION_LOCK]).catch(() => undefined);
    await runner.release();
  }
}
