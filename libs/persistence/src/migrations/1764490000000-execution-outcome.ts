import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The execution's overall outcome (`{ result, evaluated_at }`), written with the criteria verdicts whenever an
 * evaluation changes a verdict, also after completion. Null while the execution has no criteria or none was judged.
 */
export class ExecutionOutcome1764490000000 implements MigrationInterface {
  name = 'ExecutionOutcome1764490000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE executions ADD COLUMN outcome jsonb`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE executions DROP COLUMN outcome`);
  }
}
