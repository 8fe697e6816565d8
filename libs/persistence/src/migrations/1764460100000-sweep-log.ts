import { sqlMigration } from './sql-migration';

/** A record of every sweep, so "one sweeper at a time" can be checked from the database. */
export class SweepLog1764460100000 extends sqlMigration('SweepLog1764460100000', {
  up: [
    `
      CREATE TABLE sweep_log (
        id bigserial PRIMARY KEY,
        worker text NOT NULL,
        started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        finished_at timestamptz,
        report jsonb
      )`,
  ],
  down: [`DROP TABLE sweep_log`],
}) {}
