import { sqlMigration } from './sql-migration';

/**
 * Each allowlist entry of the `http` connector now names the tenant's secrets that may be sent to its host
 * (`secrets`; absent: none), so that an agent cannot send a token meant for one host to another allowlisted one. The
 * entries stored before were written when every secret could go to every allowlisted host: they get `["*"]`, which
 * keeps exactly that, so no deployment's calls start failing; only entries written from now on get the secure default.
 * An entry that already names its secrets (`[]` for none: the settings API always writes the key) is left as it is.
 */
export class AllowHostsSecrets1764580000000 extends sqlMigration('AllowHostsSecrets1764580000000', {
  up: [
    `
      UPDATE tenant_connector_settings
         SET allow_hosts = (SELECT jsonb_agg(CASE WHEN entry ? 'secrets' THEN entry
                                                  ELSE entry || '{"secrets": ["*"]}'::jsonb END ORDER BY position)
                              FROM jsonb_array_elements(allow_hosts) WITH ORDINALITY AS e(entry, position))
       WHERE jsonb_typeof(allow_hosts) = 'array' AND jsonb_array_length(allow_hosts) > 0`,
  ],
  // Nothing to undo: the code before this migration ignores the key. Removing it would turn every binding an admin
  // narrowed, and every entry written as "no secret" (`[]`), into "every secret" at the next up. Left in place, a
  // later up completes only the entries that older code wrote meanwhile (which meant every secret).
  down: [],
}) {}
