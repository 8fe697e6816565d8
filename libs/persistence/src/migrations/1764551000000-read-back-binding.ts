import { sqlMigration } from './sql-migration';

/**
 * A tenant's rule for the read-backs its `http` operations declare (`read_back_binding`, set by its admin): `declared`
 * (every declared read-back counts, as before) or `bound` (a read-back counts only when it asks the operation's own
 * origin about this very effect: `{{ref}}`, `{{operation_id}}` or `{{idempotency_key}}` in its URL or a header).
 * Existing rows keep `declared`, the behaviour they were written under.
 */
export class ReadBackBinding1764551000000 extends sqlMigration('ReadBackBinding1764551000000', {
  up: [
    `
      ALTER TABLE tenant_connector_settings
        ADD COLUMN read_back_binding text NOT NULL DEFAULT 'declared'
          CONSTRAINT tenant_connector_settings_read_back_binding CHECK (read_back_binding IN ('declared', 'bound'))`,
  ],
  down: [`ALTER TABLE tenant_connector_settings DROP COLUMN read_back_binding`],
}) {}
