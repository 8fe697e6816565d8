import { sqlMigration } from './sql-migration';

/**
 * The platform `operator` role (Bull Board, /metrics): its keys belong to no tenant. The CHECK ties the two together,
 * so no tenant key can be an operator and no operator key can carry a tenant whose data it could then read.
 */
export class OperatorKeys1764480000000 extends sqlMigration('OperatorKeys1764480000000', {
  up: [
    `ALTER TABLE api_keys DROP CONSTRAINT IF EXISTS api_keys_role_check`,
    `ALTER TABLE api_keys ALTER COLUMN tenant_id DROP NOT NULL`,
    `ALTER TABLE api_keys ADD CONSTRAINT api_keys_role_check CHECK (role IN ('agent', 'reviewer', 'admin', 'operator'))`,
    `ALTER TABLE api_keys ADD CONSTRAINT api_keys_operator_no_tenant CHECK ((role = 'operator') = (tenant_id IS NULL))`,
  ],
  down: [
    `DELETE FROM api_keys WHERE role = 'operator'`,
    `ALTER TABLE api_keys DROP CONSTRAINT api_keys_operator_no_tenant`,
    `ALTER TABLE api_keys DROP CONSTRAINT api_keys_role_check`,
    `ALTER TABLE api_keys ALTER COLUMN tenant_id SET NOT NULL`,
    `ALTER TABLE api_keys ADD CONSTRAINT api_keys_role_check CHECK (role IN ('agent', 'reviewer', 'admin'))`,
  ],
}) {}
