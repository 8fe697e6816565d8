import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Each allowlist entry of the `http` connector now names the tenant's secrets that may be sent to its host
 * (`secrets`; absent: none), so that an agent cannot send a token meant for one host to another allowlisted one. The
 * entries stored before were written when every secret could go to every allowlisted host: they get `["*"]`, which
 * keeps exactly that, so no deployment's calls start failing; only entries written from now on get the secure default.
 * An entry that already names its secrets is left as it is.
 */
export class AllowHostsSecrets1764580000000 implements MigrationInterface {
  name = 'AllowHostsSecrets1764580000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      UPDATE tenant_connector_settings
         SET allow_hosts = (SELECT jsonb_agg(CASE WHEN entry ? 'secrets' THEN entry
                                                  ELSE entry || '{"secrets": ["*"]}'::jsonb END ORDER BY position)
                              FROM jsonb_array_elements(allow_hosts) WITH ORDINALITY AS e(entry, position))
       WHERE jsonb_typeof(allow_hosts) = 'array' AND jsonb_array_length(allow_hosts) > 0`);
  }

  async down(q: QueryRunner): Promise<void> {
    // The code before this migration knows no binding: every entry lets every secret through again.
    await q.query(`
      UPDATE tenant_connector_settings
         SET allow_hosts = (SELECT jsonb_agg(entry - 'secrets' ORDER BY position)
                              FROM jsonb_array_elements(allow_hosts) WITH ORDINALITY AS e(entry, position))
       WHERE jsonb_typeof(allow_hosts) = 'array' AND jsonb_array_length(allow_hosts) > 0`);
  }
}
