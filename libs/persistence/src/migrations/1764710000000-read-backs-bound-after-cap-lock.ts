import { sqlMigration } from './sql-migration';

/**
 * Whether a tenant has bound its read-backs for a connector (`read_back_binding = 'bound'`), as the statement that
 * writes VERIFIED from an unbound read-back judges it: read only once the caller holds the connector's spending-caps
 * lock, shared, and by a query of its own — a fresh snapshot, not the calling statement's (VOLATILE). A change of the
 * settings holds that lock exclusively to its commit, so such a VERIFIED either commits before the bind (the bind
 * waits for it) or reads the binding after it. Read from the statement's snapshot, a VERIFIED whose statement began
 * before the bind and waited for the operation's row committed after it. The lock key is the one capped sends take.
 */
export class ReadBacksBoundAfterCapLock1764710000000 extends sqlMigration('ReadBacksBoundAfterCapLock1764710000000', {
  up: [
    `
      CREATE FUNCTION verity_read_backs_bound_locked(p_tenant text, p_connector text) RETURNS boolean
      LANGUAGE plpgsql VOLATILE AS $$
      BEGIN
        PERFORM pg_advisory_xact_lock_shared(727002, hashtext(p_tenant || '/' || p_connector));
        RETURN EXISTS (SELECT 1 FROM tenant_connector_settings s
                        WHERE s.tenant_id = p_tenant AND s.connector = p_connector AND s.read_back_binding = 'bound');
      END
      $$`,
  ],
  down: [`DROP FUNCTION verity_read_backs_bound_locked(text, text)`],
}) {}
