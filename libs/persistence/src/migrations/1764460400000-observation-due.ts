import { sqlMigration } from './sql-migration';

/**
 * Observation after VERIFIED: for a VERIFIED operation `next_check_at` is when it is next read again (observation).
 * The sweeper finds the due ones through this small partial index instead of scanning every settled operation.
 */
export class ObservationDue1764460400000 extends sqlMigration('ObservationDue1764460400000', {
  up: [
    `
      CREATE INDEX operations_observation_due ON operations (next_check_at)
      WHERE status = 'VERIFIED' AND next_check_at IS NOT NULL`,
  ],
  down: [`DROP INDEX operations_observation_due`],
}) {}
