import { DataSource } from 'typeorm';
import { dataSourceOptions, MIGRATIONS } from '@verity/persistence';
import type { TestDatabase } from './services';

/**
 * Takes a test database back to the schema (and code) before `migration`: it and every later one are undone. Returns
 * the upgrade — all of them run again, as a deployment's start would, checked to be exactly those.
 */
export async function undoMigrationsFrom(db: TestDatabase, migration: (typeof MIGRATIONS)[number]) {
  const undone = MIGRATIONS.length - MIGRATIONS.indexOf(migration);
  for (let i = 0; i < undone; i += 1) await db.dataSource.undoLastMigration({ transaction: 'each' });
  return async function upgrade(): Promise<void> {
    const stepper = new DataSource({ ...dataSourceOptions(db.url, 1), migrations: MIGRATIONS });
    await stepper.initialize();
    try {
      const ran = await stepper.runMigrations({ transaction: 'each' });
      if (ran.length !== undone) throw new Error(`the upgrade ran ${ran.length} migrations, not ${undone}`);
    } finally {
      await stepper.destroy();
    }
  };
}
