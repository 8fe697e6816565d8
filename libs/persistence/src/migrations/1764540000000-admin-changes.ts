import { sqlMigration } from './sql-migration';

/**
 * The history of a tenant's admin changes: every write of its policy (`PUT /v1/admin/policy`) and of a connector's
 * settings (`PUT`/`DELETE` under `/v1/admin/connector-settings`), each with who made it, when (the database's clock),
 * and the settings before and after. A row is written by the change's own statement (the policy) or in its own
 * transaction (connector settings), so a change that fails or is refused leaves none, and one that commits always
 * has one.
 *
 * Append-only: a trigger refuses every UPDATE and DELETE. `before` and `after` never hold a secret's value (connector
 * settings list secret names, as `GET /v1/admin/connector-settings/{connector}` does).
 */
export class AdminChanges1764540000000 extends sqlMigration('AdminChanges1764540000000', {
  up: [
    `
      CREATE TABLE admin_changes (
        id text PRIMARY KEY,
        tenant_id text NOT NULL REFERENCES tenants(id),
        kind text NOT NULL CHECK (kind IN ('policy', 'connector_settings')),
        connector text,
        changed_by text NOT NULL,
        changed_at timestamptz NOT NULL DEFAULT now(),
        before jsonb NOT NULL,
        after jsonb NOT NULL,
        CONSTRAINT admin_changes_connector CHECK ((kind = 'policy') = (connector IS NULL))
      )`,
    // The list: one tenant's changes, newest first (ids sort by creation time).
    `CREATE INDEX admin_changes_tenant ON admin_changes (tenant_id, id)`,
    `
      CREATE FUNCTION admin_changes_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        RAISE EXCEPTION 'admin_changes is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
      END $$`,
    `
      CREATE TRIGGER admin_changes_append_only BEFORE UPDATE OR DELETE ON admin_changes
      FOR EACH ROW EXECUTE FUNCTION admin_changes_append_only()`,
  ],
  down: [`DROP TABLE admin_changes`, `DROP FUNCTION admin_changes_append_only()`],
}) {}
