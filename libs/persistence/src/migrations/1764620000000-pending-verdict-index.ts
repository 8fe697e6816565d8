import { sqlMigration } from './sql-migration';

/**
 * The sweeper owes an evaluation to an ended execution with a pending verdict of an operation that has since become
 * final, whatever its outcome says: an outcome already `unmet` (another criterion failed) keeps a verdict `pending` of
 * an operation resolved later if that resolution's advance was lost. The partial index that keeps this read to the few
 * such rows (1764600000000) selected by the outcome; it now selects by the pending verdict itself. Keep the predicate
 * identical to SWEEP_SQL.endedWithStaleOutcome's.
 */
export class PendingVerdictIndex1764620000000 extends sqlMigration('PendingVerdictIndex1764620000000', {
  up: [
    `DROP INDEX executions_ended_pending_outcome`,
    `
      CREATE INDEX executions_ended_pending_verdict ON executions (id)
      WHERE status IN ('completed', 'failed', 'cancelled', 'expired')
        AND criteria_results @> '[{"verdict": "pending"}]'::jsonb`,
  ],
  down: [
    `DROP INDEX executions_ended_pending_verdict`,
    `
      CREATE INDEX executions_ended_pending_outcome ON executions (id)
      WHERE status IN ('completed', 'failed', 'cancelled', 'expired') AND (outcome->>'result') = 'pending'`,
  ],
}) {}
