import { sqlMigration } from './sql-migration';

/**
 * The version of a tenant's settings for a connector as the statement that commits SENT compares it (the send guard's
 * `settings_changed`), read only once the caller holds the connector's spending-caps lock, shared, and by a query of
 * its own — a fresh snapshot, not the calling statement's (the function is VOLATILE). A change of the settings takes
 * that lock exclusively for its whole transaction, so a send either commits before the change counts what was sent (its
 * backfill sees it) or reads the version after the change committed (and is prepared again from it). Read from the
 * calling statement's snapshot, a send could pass the check while a first cap was being set and commit after the
 * backfill, never counted by the cap (red team round 7). The lock key is the one capped sends take (`capLock`).
 */
export class SettingsVersionAfterCapLock1764590000000 extends sqlMigration('SettingsVersionAfterCapLock1764590000000', {
  up: [
    `
      CREATE FUNCTION verity_settings_version_locked(p_tenant text, p_connector text) RETURNS text
      LANGUAGE plpgsql VOLATILE AS $$
      BEGIN
        PERFORM pg_advisory_xact_lock_shared(727002, hashtext(p_tenant || '/' || p_connector));
        RETURN (SELECT (extract(epoch FROM s.updated_at) * 1000000)::bigint::text FROM tenant_connector_settings s
                 WHERE s.tenant_id = p_tenant AND s.connector = p_connector);
      END
      $$`,
  ],
  down: [`DROP FUNCTION verity_settings_version_locked(text, text)`],
}) {}
