import { TestDatabase } from '../../../test/support/services';
import { useTestDatabase } from '../../../test/support/test-database';
import { DataSource } from 'typeorm';
import { dataSourceOptions, runMigrationsLocked } from './data-source';
import { MIGRATIONS } from './migrations';

/** The schema as Postgres reports it: tables with their columns and storage options, indexes, constraints, triggers. */
async function schema(db: TestDatabase): Promise<string[]> {
  const found = (await db.dataSource.query(`
    SELECT 'table ' || c.relname || ' ' || coalesce(array_to_string(c.reloptions, ','), '') || ' (' ||
           string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END ||
                      coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), ''), ', ' ORDER BY a.attnum) || ')' AS item
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
      LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
     WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname <> 'migrations'
     GROUP BY c.relname, c.reloptions
    UNION ALL
    SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename <> 'migrations'
    UNION ALL
    SELECT 'constraint ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
      FROM pg_constraint WHERE connamespace = 'public'::regnamespace AND conrelid <> 'migrations'::regclass
    UNION ALL
    SELECT 'trigger ' || pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal
    ORDER BY 1`)) as { item: string }[];
  return found.map((r) => r.item);
}

/**
 * Every migration can be reverted (its down() undoes exactly its up()), so a bad release can be rolled back: stepping
 * down one migration at a time passes through the very schemas that stepping up passed through.
 */
describe('migrations (real Postgres)', () => {
  const db = useTestDatabase('migrations');

  const down = () => db.dataSource.undoLastMigration({ transaction: 'each' });

  it('each down() restores the schema its up() found, down to an empty database and back', async () => {
    const migrated = await schema(db);
    expect(migrated).toContain(
      "index CREATE INDEX executions_active ON public.executions USING btree (deadline_at) WHERE (status <> ALL (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text, 'expired'::text]))",
    );
    for (let i = 0; i < MIGRATIONS.length; i += 1) await down();
    expect(await schema(db)).toEqual([]);

    // Up one migration at a time: the schema after each.
    const after: string[][] = [[]];
    for (let k = 1; k <= MIGRATIONS.length; k += 1) {
      const stepper = new DataSource({ ...dataSourceOptions(db.url, 1), migrations: MIGRATIONS.slice(0, k) });
      await stepper.initialize();
      try {
        expect(await stepper.runMigrations({ transaction: 'each' })).toHaveLength(1);
      } finally {
        await stepper.destroy();
      }
      after.push(await schema(db));
    }
    expect(after[MIGRATIONS.length]).toEqual(migrated);

    // Down one at a time: each step lands on the schema the same step up started from.
    for (let k = MIGRATIONS.length - 1; k >= 0; k -= 1) {
      await down();
      expect([MIGRATIONS[k].name, await schema(db)]).toEqual([MIGRATIONS[k].name, after[k]]);
    }
    await runMigrationsLocked(db.dataSource);
    expect(await schema(db)).toEqual(migrated);
  });

  it('does not revert the webhook_endpoint kind of admin changes once the history holds one: it would lose it', async () => {
    const migrated = await schema(db);
    await db.dataSource.query(`INSERT INTO tenants (id, name) VALUES ('t', 't')`);
    await db.dataSource.query(`INSERT INTO admin_changes (id, tenant_id, kind, connector, changed_by, before, after)
      VALUES ('chg_1', 't', 'webhook_endpoint', NULL, 'key_1', NULL, '{"id": "whk_1"}')`);
    // The migrations after it (the history's order column) revert as usual.
    const after = MIGRATIONS.findIndex((m) => m.name === 'AdminChangesWebhooks1764560000000') + 1;
    for (let k = MIGRATIONS.length; k > after; k -= 1) await down();
    const before = await schema(db);
    await expect(down()).rejects.toThrow(/webhook_endpoint entries/);
    expect(await schema(db)).toEqual(before);
    await runMigrationsLocked(db.dataSource);
    expect(await schema(db)).toEqual(migrated);
    expect(await db.dataSource.query(`SELECT id FROM admin_changes`)).toEqual([{ id: 'chg_1' }]);
  });

  it('binds every secret to the allowlist entries stored before secrets were bound to hosts, and down leaves every binding', async () => {
    const index = MIGRATIONS.findIndex((m) => m.name === 'AllowHostsSecrets1764580000000');
    expect(index).toBeGreaterThan(0);
    for (let k = MIGRATIONS.length; k > index; k -= 1) await down();
    await db.dataSource.query(
      `INSERT INTO tenants (id, name) VALUES ('tb', 'tb'), ('tc', 'tc') ON CONFLICT DO NOTHING`,
    );
    await db.dataSource.query(
      `INSERT INTO tenant_connector_settings (tenant_id, connector, allow_hosts) VALUES
         ('tb', 'http', $1::jsonb), ('tc', 'http', '[]'::jsonb), ('tc', 'sandbox.sms', '[]'::jsonb)`,
      [
        JSON.stringify([
          { host: 'crm.example.com', ports: [443] },
          { host: '127.0.0.1', ports: [8080], allow_private: true },
        ]),
      ],
    );
    const allowHosts = async () =>
      (
        (await db.dataSource.query(
          `SELECT tenant_id, connector, allow_hosts FROM tenant_connector_settings ORDER BY tenant_id, connector`,
        )) as { tenant_id: string; connector: string; allow_hosts: unknown }[]
      ).map((r) => [r.tenant_id, r.connector, r.allow_hosts]);
    await runMigrationsLocked(db.dataSource);
    // The entries keep what they allowed (every secret, as before), in their order; rows without entries are unchanged.
    expect(await allowHosts()).toEqual([
      [
        'tb',
        'http',
        [
          { host: 'crm.example.com', ports: [443], secrets: ['*'] },
          { host: '127.0.0.1', ports: [8080], allow_private: true, secrets: ['*'] },
        ],
      ],
      ['tc', 'http', []],
      ['tc', 'sandbox.sms', []],
    ]);
    // Entries written under the binding (a narrowed one, one that allows none), then a rollback and an older code's
    // entry without the key: down keeps every binding, and the next up completes only the older code's entry — no
    // "none" ever turns into "every secret".
    await db.dataSource.query(`UPDATE tenant_connector_settings SET allow_hosts = $1::jsonb WHERE tenant_id = 'tb'`, [
      JSON.stringify([
        { host: 'crm.example.com', secrets: ['crm_token'] },
        { host: 'hooks.example.com', secrets: [] },
      ]),
    ]);
    // Down to before the binding (the migrations after it first).
    for (let k = MIGRATIONS.length; k > index; k -= 1) await down();
    const bound = [
      { host: 'crm.example.com', secrets: ['crm_token'] },
      { host: 'hooks.example.com', secrets: [] },
    ];
    expect((await allowHosts())[0][2]).toEqual(bound);
    await db.dataSource.query(
      `UPDATE tenant_connector_settings SET allow_hosts = allow_hosts || $1::jsonb WHERE tenant_id = 'tb'`,
      [JSON.stringify([{ host: 'legacy.example.com' }])],
    );
    await runMigrationsLocked(db.dataSource);
    expect((await allowHosts())[0][2]).toEqual([...bound, { host: 'legacy.example.com', secrets: ['*'] }]);
  });
});
