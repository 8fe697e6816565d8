import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The W3C `traceparent` of the request that created an execution (null with traces off): work re-enqueued later from
 * Postgres (the sweeper) joins the execution's trace, and the API answers with its trace id.
 */
export class ExecutionTrace1764520300000 implements MigrationInterface {
  name = 'ExecutionTrace1764520300000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE executions ADD COLUMN trace_parent text`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE executions DROP COLUMN trace_parent`);
  }
}
