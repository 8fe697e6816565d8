import { sqlMigration } from './sql-migration';

/** The sweeper deletes expired idempotency records in batches: it finds the oldest through this index, not a scan. */
export class IdempotencyExpiryIndex1764500000000 extends sqlMigration('IdempotencyExpiryIndex1764500000000', {
  up: [`CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at)`],
  down: [`DROP INDEX idempotency_keys_expires_at`],
}) {}
