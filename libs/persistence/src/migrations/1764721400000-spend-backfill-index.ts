import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * A cap's backfill reads the sends of one tenant's connector in its window (`attempt > 0`, by `sent_at`): without an
 * index it scanned every operation of every tenant, under the caps' lock that every send of the connector waits for.
 * Only sent rows are in it, and a SENT already moves an indexed column (status): no update that was HOT stops being so.
 *
 * Built CONCURRENTLY, outside a transaction (`transaction = false`; the migration step runs each migration in its own
 * transaction otherwise): a plain CREATE INDEX holds a SHARE lock on operations for the whole build, and every intake,
 * send and transition waits for it (one queued behind it waits too). A build that failed half-way leaves an invalid
 * index of the name, which IF NOT EXISTS would keep: it is dropped first. `down` runs in the undo's transaction, so it
 * drops plainly (no build: a brief lock).
 */
export class SpendBackfillIndex1764721400000 implements MigrationInterface {
  name = 'SpendBackfillIndex1764721400000';
  transaction = false;

  async up(q: QueryRunner): Promise<void> {
    const invalid = (await q.query(
      `SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE c.relname = 'operations_sent_by_connector' AND c.relnamespace = current_schema()::regnamespace
          AND NOT i.indisvalid`,
    )) as unknown[];
    if (invalid.length > 0) await q.query(`DROP INDEX CONCURRENTLY IF EXISTS operations_sent_by_connector`);
    await q.query(
      `CREATE INDEX CONCURRENTLY IF NOT EXISTS operations_sent_by_connector ON operations (tenant_id, connector, sent_at) WHERE attempt > 0`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX IF EXISTS operations_sent_by_connector`);
  }
}
