import { sqlMigration } from './sql-migration';

/**
 * Ended executions whose outcome is still pending: the sweeper looks among them for a verdict an operation has since
 * settled (a resolution whose advance job was lost), and this keeps that read to the few such rows instead of every
 * ended execution.
 */
export class PendingOutcomeIndex1764600000000 extends sqlMigration('PendingOutcomeIndex1764600000000', {
  up: [
    `
      CREATE INDEX executions_ended_pending_outcome ON executions (id)
      WHERE status IN ('completed', 'failed', 'cancelled', 'expired') AND (outcome->>'result') = 'pending'`,
  ],
  down: [`DROP INDEX executions_ended_pending_outcome`],
}) {}
