import { sqlMigration } from './sql-migration';

/**
 * The sweeper also owes an evaluation to an ended execution whose criteria were never evaluated (criteria_results
 * still null): one cancelled, or expired, before the dispatcher's first advance ran, whose advance was lost (Redis down
 * at the enqueue). Its verdicts show as pending on the wire, so clients waiting for the outcome waited for good. The
 * partial index of 1764620000000 grows by that case (its name kept: on the wire those verdicts are pending too). Keep
 * the predicate identical to SWEEP_SQL.endedWithStaleOutcome's.
 */
export class UnevaluatedEndedIndex1764640000000 extends sqlMigration('UnevaluatedEndedIndex1764640000000', {
  up: [
    `DROP INDEX executions_ended_pending_verdict`,
    `
      CREATE INDEX executions_ended_pending_verdict ON executions (id)
      WHERE status IN ('completed', 'failed', 'cancelled', 'expired')
        AND (criteria_results @> '[{"verdict": "pending"}]'::jsonb
             OR (criteria_results IS NULL AND criteria <> '[]'::jsonb))`,
  ],
  down: [
    `DROP INDEX executions_ended_pending_verdict`,
    `
      CREATE INDEX executions_ended_pending_verdict ON executions (id)
      WHERE status IN ('completed', 'failed', 'cancelled', 'expired')
        AND criteria_results @> '[{"verdict": "pending"}]'::jsonb`,
  ],
}) {}
