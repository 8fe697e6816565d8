import { sqlMigration } from './sql-migration';

/**
 * The W3C `traceparent` of the request that created an execution (null with traces off): work re-enqueued later from
 * Postgres (the sweeper) joins the execution's trace, and the API answers with its trace id.
 */
export class ExecutionTrace1764520300000 extends sqlMigration('ExecutionTrace1764520300000', {
  up: [`ALTER TABLE executions ADD COLUMN trace_parent text`],
  down: [`ALTER TABLE executions DROP COLUMN trace_parent`],
}) {}
