import { DataSource } from 'typeorm';
import { dataSourceOptions, MIGRATIONS } from '@verity/persistence';
import { insertChargeExecution } from './fixtures';
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

/**
 * `count` charge operations of `tenant`, written by today's intake statement before the schema goes back (it names
 * later columns); then the schema taken back to before `migration`, and each operation's row set as `set` says (an
 * UPDATE's SET list: where the code of then had left it). Returns them, in order, and the upgrade.
 */
export async function chargeOperationsBefore(
  db: TestDatabase,
  migration: (typeof MIGRATIONS)[number],
  tenant: string,
  count: number,
  set: string,
) {
  const manager = db.dataSource.manager;
  const operations: { executionId: string; operationId: string }[] = [];
  for (let i = 0; i < count; i += 1) operations.push(await insertChargeExecution(manager, tenant));
  const upgrade = await undoMigrationsFrom(db, migration);
  for (const op of operations) {
    await manager.query(`UPDATE operations SET ${set} WHERE id = $1`, [op.operationId]);
  }
  return { operations, upgrade };
}
