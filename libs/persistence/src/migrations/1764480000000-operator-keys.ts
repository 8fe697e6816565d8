import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The platform `operator` role (Bull Board, /metrics): its keys belong to no tenant. The CHECK ties the two together,
 * so no tenant key can be an operator and no operator key can carry a tenant whose data it could then read.
 */
export class OperatorKeys1764480000000 implements MigrationInterface {
  name = 'OperatorKeys1764480000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE api_keys DROP CONSTRAINT IF EXISTS api_keys_role_check`);
    await q.query(`ALTER TABLE api_keys ALTER COLUMN tenant_id DROP NOT NULL`);
    await q.query(
      `ALTER TABLE api_keys ADD CONSTRAINT api_keys_role_check CHECK (role IN ('agent', 'reviewer', 'admin', 'operator'))`,
    );
    await q.query(
      `ALTER TABLE api_keys ADD CONSTRAINT api_keys_operator_no_tenant CHECK ((role = 'operator') = (tenant_id IS NULL))`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DELETE FROM api_keys WHERE role = 'operator'`);
    await q.query(`ALTER TABLE api_keys DROP CONSTRAINT api_keys_operator_no_tenant`);
    await q.query(`ALTER TABLE api_keys DROP CONSTRAINT api_keys_role_check`);
    await q.query(`ALTER TABLE api_keys ALTER COLUMN tenant_id SET NOT NULL`);
    await q.query(
      `ALTER TABLE api_keys ADD CONSTRAINT api_keys_role_check CHECK (role IN ('agent', 'reviewer', 'admin'))`,
    );
  }
}
