import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The history of admin changes also records webhook endpoints (kind `webhook_endpoint`): an endpoint receives every
 * event it subscribes to, so one added and deleted again must leave a trace. Such an entry has no connector, and its
 * `before` is null for a create and its `after` null for a delete (there was, or is, no endpoint); the policy and a
 * connector's settings always exist, so their entries keep both.
 */
export class AdminChangesWebhooks1764560000000 implements MigrationInterface {
  name = 'AdminChangesWebhooks1764560000000';

  async up(q: QueryRunner): Promise<void> {
    // Same constraint names as 1764540000000, so down() restores exactly what it found.
    await q.query(`ALTER TABLE admin_changes DROP CONSTRAINT admin_changes_kind_check`);
    await q.query(`ALTER TABLE admin_changes ADD CONSTRAINT admin_changes_kind_check
      CHECK (kind IN ('policy', 'connector_settings', 'webhook_endpoint'))`);
    await q.query(`ALTER TABLE admin_changes DROP CONSTRAINT admin_changes_connector`);
    await q.query(`ALTER TABLE admin_changes ADD CONSTRAINT admin_changes_connector
      CHECK ((kind = 'connector_settings') = (connector IS NOT NULL))`);
    await q.query(`ALTER TABLE admin_changes ALTER COLUMN before DROP NOT NULL, ALTER COLUMN after DROP NOT NULL`);
    await q.query(`ALTER TABLE admin_changes ADD CONSTRAINT admin_changes_sides CHECK (CASE
      WHEN kind = 'webhook_endpoint' THEN before IS NOT NULL OR after IS NOT NULL
      ELSE before IS NOT NULL AND after IS NOT NULL END)`);
  }

  async down(q: QueryRunner): Promise<void> {
    // The table is append-only: a rollback does not delete history to fit the older constraints.
    const [recorded] = (await q.query(
      `SELECT 1 FROM admin_changes WHERE kind = 'webhook_endpoint' LIMIT 1`,
    )) as unknown[];
    if (recorded) {
      throw new Error('admin_changes holds webhook_endpoint entries: the older schema cannot keep them, not reverted');
    }
    await q.query(`ALTER TABLE admin_changes DROP CONSTRAINT admin_changes_sides`);
    await q.query(`ALTER TABLE admin_changes ALTER COLUMN before SET NOT NULL, ALTER COLUMN after SET NOT NULL`);
    await q.query(`ALTER TABLE admin_changes DROP CONSTRAINT admin_changes_connector`);
    await q.query(`ALTER TABLE admin_changes ADD CONSTRAINT admin_changes_connector
      CHECK ((kind = 'policy') = (connector IS NULL))`);
    await q.query(`ALTER TABLE admin_changes DROP CONSTRAINT admin_changes_kind_check`);
    await q.query(`ALTER TABLE admin_changes ADD CONSTRAINT admin_changes_kind_check
      CHECK (kind IN ('policy', 'connector_settings'))`);
  }
}
