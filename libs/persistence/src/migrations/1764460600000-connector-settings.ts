import { sqlMigration } from './sql-migration';

/**
 * Tenant connector settings (outbound allowlist, spending caps), tenant secrets in a table of their own (so no
 * settings query can select them by accident), and the spending ledger the caps are counted against.
 */
export class ConnectorSettings1764460600000 extends sqlMigration('ConnectorSettings1764460600000', {
  up: [
    `
      CREATE TABLE tenant_connector_settings (
        tenant_id text NOT NULL REFERENCES tenants(id),
        connector text NOT NULL,
        allow_hosts jsonb NOT NULL DEFAULT '[]',
        spending_caps jsonb NOT NULL DEFAULT '[]',
        updated_by text,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (tenant_id, connector)
      )`,
    `
      CREATE TABLE tenant_connector_secrets (
        tenant_id text NOT NULL REFERENCES tenants(id),
        connector text NOT NULL,
        name text NOT NULL,
        value text NOT NULL,
        updated_by text,
        updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (tenant_id, connector, name)
      )`,
    // One row per operation handed to a capped connector: counted under a per-(tenant, connector) lock.
    `
      CREATE TABLE connector_spend (
        operation_id text PRIMARY KEY REFERENCES operations(id),
        tenant_id text NOT NULL,
        connector text NOT NULL,
        spent_at timestamptz NOT NULL DEFAULT clock_timestamp()
      )`,
    `CREATE INDEX connector_spend_window ON connector_spend (tenant_id, connector, spent_at)`,
  ],
  down: [`DROP TABLE connector_spend`, `DROP TABLE tenant_connector_secrets`, `DROP TABLE tenant_connector_settings`],
}) {}
