import { sqlMigration } from './sql-migration';

/**
 * The execution's overall outcome (`{ result, evaluated_at }`), written with the criteria verdicts whenever an
 * evaluation changes a verdict, also after completion. Null while the execution has no criteria or none was judged.
 */
export class ExecutionOutcome1764490000000 extends sqlMigration('ExecutionOutcome1764490000000', {
  up: [`ALTER TABLE executions ADD COLUMN outcome jsonb`],
  down: [`ALTER TABLE executions DROP COLUMN outcome`],
}) {}
