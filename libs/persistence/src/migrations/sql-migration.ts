import { MigrationInterface, QueryRunner } from 'typeorm';

/** What a migration that only runs fixed statements sends: `up` in order, then, to undo it, `down` in order. */
export interface MigrationStatements {
  up: readonly string[];
  down: readonly string[];
}

/**
 * The base class of a migration that only runs fixed statements, so its file holds its SQL and nothing else. Each
 * migration still exports a class of its own (`class X1764… extends sqlMigration('X1764…', …) {}`): TypeORM records
 * `name` in the migrations table, and the class name is what the file, MIGRATIONS and the table are read by. A
 * migration that decides something at run time (reads before it writes) implements MigrationInterface itself.
 *
 * `transaction: false` runs its statements outside a transaction, each committed on its own: what `CREATE INDEX
 * CONCURRENTLY` and `DROP INDEX CONCURRENTLY` need (Postgres refuses them in a transaction block). Each statement must
 * then be safe to run again from the top: a run cut short keeps what its earlier statements did, and a failed
 * concurrent build leaves an invalid index under its name (drop it `IF EXISTS` before building it).
 */
export function sqlMigration(
  name: string,
  statements: MigrationStatements,
  options: { transaction?: false } = {},
): new () => MigrationInterface {
  return class implements MigrationInterface {
    name = name;
    transaction = options.transaction;

    async up(q: QueryRunner): Promise<void> {
      for (const statement of statements.up) await q.query(statement);
    }

    async down(q: QueryRunner): Promise<void> {
      for (const statement of statements.down) await q.query(statement);
    }
  };
}
