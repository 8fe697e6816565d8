import { MigrationInterface, QueryRunner } from 'typeorm';

/** The sweeper deletes expired idempotency records in batches: it finds the oldest through this index, not a scan. */
export class IdempotencyExpiryIndex1764500000000 implements MigrationInterface {
  name = 'IdempotencyExpiryIndex1764500000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at)`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX idempotency_keys_expires_at`);
  }
}
