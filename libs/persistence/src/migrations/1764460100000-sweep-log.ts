import { MigrationInterface, QueryRunner } from 'typeorm';

/** A record of every sweep, so "one sweeper at a time" can be checked from the database. */
export class SweepLog1764460100000 implements MigrationInterface {
  name = 'SweepLog1764460100000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE sweep_log (
        id bigserial PRIMARY KEY,
        worker text NOT NULL,
        started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        finished_at timestamptz,
        report jsonb
      )`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE sweep_log`);
  }
}
