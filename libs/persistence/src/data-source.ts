import { DataSource, DataSourceOptions } from 'typeorm';
import { ENTITIES } from './entities';
import { MIGRATIONS } from './migrations';

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
    extra: { max: poolSize, connectionTimeoutMillis: 5000 },
  };
}

export function createDataSource(url: string, poolSize = 10): DataSource {
  return new DataSource(dataSourceOptions(url, poolSize));
}

const MIGRATION_LOCK = 727_001;

/** Two replicas starting at once must not both migrate: the first takes the advisory lock, the other waits. */
export async function runMigrationsLocked(dataSource: DataSource): Promise<string[]> {
  const runner = dataSource.createQueryRunner();
  await runner.connect();
  try {
    await runner.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
    const applied = await dataSource.runMigrations({ transaction: 'each' });
    return applied.map((m) => m.name);
  } finally {
    await runner.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => undefined);
    await runner.release();
  }
}
