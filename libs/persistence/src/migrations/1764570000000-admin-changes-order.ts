import { sqlMigration } from './sql-migration';

/**
 * The history of admin changes lists in the order the changes were made. Its ids sort by the time the API minted them,
 * which for a policy change is before its statement waits for the tenant's row lock: of changes made at once, the one
 * that waited longest could list as older than changes it came after (its `before` is what they left), and an auditor
 * reading "newest first" would read the chain out of order (red team). A sequence number drawn when the row is
 * inserted — after the lock — orders them as they happened. Rows written before this migration are numbered in the
 * order the table holds them.
 */
export class AdminChangesOrder1764570000000 extends sqlMigration('AdminChangesOrder1764570000000', {
  up: [
    `ALTER TABLE admin_changes ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY`,
    `CREATE UNIQUE INDEX admin_changes_order ON admin_changes (tenant_id, seq)`,
    `DROP INDEX admin_changes_tenant`,
  ],
  down: [
    `CREATE INDEX admin_changes_tenant ON admin_changes (tenant_id, id)`,
    `DROP INDEX admin_changes_order`,
    `ALTER TABLE admin_changes DROP COLUMN seq`,
  ],
}) {}
