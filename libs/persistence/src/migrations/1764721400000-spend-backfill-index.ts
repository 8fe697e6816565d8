import { sqlMigration } from './sql-migration';

/**
 * A cap's backfill reads the sends of one tenant's connector in its window (`attempt > 0`, by `sent_at`): without an
 * index it scanned every operation of every tenant, under the caps' lock that every send of the connector waits for.
 * Only sent rows are in it, and a SENT already moves an indexed column (status): no update that was HOT stops being so.
 */
export class SpendBackfillIndex1764721400000 extends sqlMigration('SpendBackfillIndex1764721400000', {
  up: [`CREATE INDEX operations_sent_by_connector ON operations (tenant_id, connector, sent_at) WHERE attempt > 0`],
  down: [`DROP INDEX operations_sent_by_connector`],
}) {}
