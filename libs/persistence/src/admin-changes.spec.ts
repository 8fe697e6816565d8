import type { EntityManager } from 'typeorm';
import { useTestDatabase } from '../../../test/support/test-database';
import { AdminChangeRow, listAdminChanges } from './admin-changes';
import {
  changeConnectorSettings,
  clearConnectorSettings,
  deleteConnectorSecret,
  upsertConnectorSettings,
  writeConnectorSecret,
} from './connector-settings.repository';
import { SecretsCipher } from './secrets-cipher';
import { Queryable, transaction } from './sql';
import { loadTenantSettings, updateTenantPolicy } from './tenant-policy';

/**
 * The history of admin changes is written with the change itself: the policy's by its UPDATE statement, a connector's
 * settings in the transaction that writes them. A change that fails leaves no row; concurrent changes each get their
 * own row, whose `before` is exactly what the change before it left. Secret values are never in it.
 */
describe('admin change history (real Postgres)', () => {
  const db = useTestDatabase('adminchanges', ['acme', 'other', 'racing', 'racing2']);
  // No SECRETS_KEY: the secret is stored as it is, so a history that read the column would hold it in clear.
  const cipher = new SecretsCipher(undefined);
  const SECRET = 'sk_live_history-must-never-hold-this';

  const history = async (tenantId: string): Promise<AdminChangeRow[]> =>
    listAdminChanges(db.dataSource.manager, { tenantId, limit: 1000 });

  /** A Queryable that counts the statements sent through it. */
  function counting(target: Queryable): { db: Queryable; sent: () => number } {
    let sent = 0;
    return {
      db: {
        query: (sql: string, params?: unknown[]) => {
          sent += 1;
          return target.query(sql, params);
        },
      } as Queryable,
      sent: () => sent,
    };
  }

  /** Makes every INSERT into admin_changes fail while `during` runs. */
  async function withHistoryBroken(during: () => Promise<unknown>): Promise<unknown> {
    await db.dataSource.query(`
      CREATE FUNCTION refuse_history() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'history refused'; END $$`);
    await db.dataSource.query(
      `CREATE TRIGGER refuse_history BEFORE INSERT ON admin_changes FOR EACH ROW EXECUTE FUNCTION refuse_history()`,
    );
    try {
      return await during().then(
        () => null,
        (error: unknown) => error,
      );
    } finally {
      await db.dataSource.query(`DROP TRIGGER refuse_history ON admin_changes`);
      await db.dataSource.query(`DROP FUNCTION refuse_history()`);
    }
  }

  it('a policy change writes exactly one row, in its own single statement, with before, after and who', async () => {
    await updateTenantPolicy(db.dataSource.manager, 'acme', {
      set: { approvalRules: [{ connector: 'sandbox.payments', amount_above: 5000 }] },
      remove: [],
      by: 'key_first',
    });
    const probe = counting(db.dataSource.manager);
    const written = await updateTenantPolicy(probe.db, 'acme', {
      set: { obligationOwner: 'payments' },
      remove: ['approvalRules'],
      by: 'key_lifter',
    });
    expect(probe.sent()).toBe(1);
    expect(written?.obligationOwner).toBe('payments');
    const rows = await history('acme');
    expect(rows).toHaveLength(2);
    const lifted = rows.find((r) => r.changed_by === 'key_lifter');
    expect(lifted).toEqual({
      id: expect.stringMatching(/^chg_/),
      kind: 'policy',
      connector: null,
      changed_by: 'key_lifter',
      changed_at: expect.any(Date),
      before: {
        obligation_owner: null,
        escalation_target: null,
        obligation_due_seconds: null,
        approval_rules: [{ connector: 'sandbox.payments', amount_above: 5000 }],
        approval_amount_above: null,
      },
      after: {
        obligation_owner: 'payments',
        escalation_target: null,
        obligation_due_seconds: null,
        approval_rules: null,
        approval_amount_above: null,
      },
    });
    expect(rows.find((r) => r.changed_by === 'key_first')).toMatchObject({ before: { approval_rules: null } });
    // The database's clock, not the API's.
    const [{ now }] = (await db.dataSource.query(`SELECT now() AS now`)) as { now: Date }[];
    expect(Math.abs(new Date(lifted!.changed_at).getTime() - new Date(now).getTime())).toBeLessThan(60_000);
  });

  it('a policy change that cannot be recorded is not made; no tenant: nothing changed, nothing recorded', async () => {
    const before = await loadTenantSettings(db.dataSource.manager, 'acme');
    const count = (await history('acme')).length;
    const error = await withHistoryBroken(() =>
      updateTenantPolicy(db.dataSource.manager, 'acme', { set: { obligationOwner: 'x' }, remove: [], by: 'k' }),
    );
    expect(String(error)).toMatch(/history refused/);
    expect(await loadTenantSettings(db.dataSource.manager, 'acme')).toEqual(before);
    expect(await history('acme')).toHaveLength(count);

    const none = await updateTenantPolicy(db.dataSource.manager, 'nobody', {
      set: { obligationOwner: 'x' },
      remove: [],
      by: 'k',
    });
    expect(none).toBeNull();
    expect(await db.dataSource.query(`SELECT id FROM admin_changes WHERE tenant_id = 'nobody'`)).toEqual([]);
  });

  it('a connector settings change writes exactly one row in its transaction: secret names, never the value', async () => {
    await transaction(db.dataSource, (tx) =>
      changeConnectorSettings(tx, { tenantId: 'acme', connector: 'http', by: 'key_admin' }, async () => {
        await upsertConnectorSettings(tx, 'acme', 'http', {
          allowHosts: [{ host: 'api.example.com', ports: [443] }],
          spendingCaps: [{ period: 'day', max_operations: 10 }],
          by: 'key_admin',
        });
        await writeConnectorSecret(tx, cipher, 'acme', 'http', 'api_token', SECRET, 'key_admin');
      }),
    );
    const stored = (await db.dataSource.query(
      `SELECT value FROM tenant_connector_secrets WHERE tenant_id = 'acme' AND name = 'api_token'`,
    )) as { value: string }[];
    expect(stored).toEqual([{ value: SECRET }]);
    const rows = (await history('acme')).filter((r) => r.kind === 'connector_settings');
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      kind: 'connector_settings',
      connector: 'http',
      changed_by: 'key_admin',
      before: { allow_hosts: [], spending_caps: [], secrets: [] },
      after: {
        allow_hosts: [{ host: 'api.example.com', ports: [443] }],
        spending_caps: [{ period: 'day', max_operations: 10 }],
        secrets: ['api_token'],
      },
    });
    // Nowhere in the table, whatever column or shape.
    const everything = (await db.dataSource.query(`SELECT row_to_json(c)::text AS t FROM admin_changes c`)) as {
      t: string;
    }[];
    expect(everything.map((r) => r.t).join('\n')).not.toContain(SECRET);

    // Deleting the secret, then everything: one row each.
    const newRow = async (change: () => Promise<unknown>) => {
      const known = new Set((await history('acme')).map((r) => r.id));
      await change();
      const added = (await history('acme')).filter((r) => !known.has(r.id));
      expect(added).toHaveLength(1);
      return added[0];
    };
    const deleted = await newRow(() =>
      transaction(db.dataSource, (tx) =>
        changeConnectorSettings(tx, { tenantId: 'acme', connector: 'http', by: 'key_admin' }, () =>
          deleteConnectorSecret(tx, 'acme', 'http', 'api_token'),
        ),
      ),
    );
    const cleared = await newRow(() =>
      transaction(db.dataSource, (tx) =>
        changeConnectorSettings(tx, { tenantId: 'acme', connector: 'http', by: 'key_other' }, () =>
          clearConnectorSettings(tx, 'acme', 'http'),
        ),
      ),
    );
    expect(deleted).toMatchObject({ before: { secrets: ['api_token'] }, after: { secrets: [] } });
    expect(cleared).toMatchObject({
      changed_by: 'key_other',
      before: { allow_hosts: [{ host: 'api.example.com', ports: [443] }], secrets: [] },
      after: { allow_hosts: [], spending_caps: [], secrets: [] },
    });
  });

  it('a connector settings change that fails or is refused writes no row (and changes nothing)', async () => {
    const count = (await history('acme')).length;
    const refused = await transaction(db.dataSource, (tx) =>
      changeConnectorSettings(tx, { tenantId: 'acme', connector: 'sandbox.payments', by: 'k' }, async () => {
        await upsertConnectorSettings(tx, 'acme', 'sandbox.payments', {
          spendingCaps: [{ period: 'hour', max_operations: 1 }],
          by: 'k',
        });
        throw new Error('refused by validation');
      }),
    ).catch((error: Error) => error.message);
    expect(refused).toBe('refused by validation');
    const broken = await withHistoryBroken(() =>
      transaction(db.dataSource, (tx) =>
        changeConnectorSettings(tx, { tenantId: 'acme', connector: 'sandbox.payments', by: 'k' }, () =>
          upsertConnectorSettings(tx, 'acme', 'sandbox.payments', { spendingCaps: [], by: 'k' }),
        ),
      ),
    );
    expect(String(broken)).toMatch(/history refused/);
    // Outside a transaction it refuses before anything is written.
    await expect(
      changeConnectorSettings(db.dataSource.manager, { tenantId: 'acme', connector: 'sandbox.payments', by: 'k' }, () =>
        upsertConnectorSettings(db.dataSource.manager, 'acme', 'sandbox.payments', { spendingCaps: [], by: 'k' }),
      ),
    ).rejects.toThrow(/runs in a transaction/);
    expect(await history('acme')).toHaveLength(count);
    expect(
      await db.dataSource.query(`SELECT 1 FROM tenant_connector_settings WHERE connector = 'sandbox.payments'`),
    ).toEqual([]);
  });

  /** The rows of concurrent changes form one chain: each `before` is the `after` of the change before it. */
  function expectChain<T>(rows: AdminChangeRow[], read: (settings: Record<string, unknown>) => T, start: T): T {
    let current = start;
    const seen = new Set<string>();
    for (let i = 0; i < rows.length; i += 1) {
      const next = rows.find((r) => !seen.has(r.id) && JSON.stringify(read(r.before)) === JSON.stringify(current));
      expect({ step: i, before: current, found: next !== undefined }).toEqual({
        step: i,
        before: current,
        found: true,
      });
      seen.add(next!.id);
      current = read(next!.after);
    }
    return current;
  }

  it('concurrent policy changes each get their own row, with the before each one really changed', async () => {
    const n = 8;
    // All of them start while another transaction holds the tenant's row: each statement has taken its snapshot
    // (where the policy is still unset) before it can change anything.
    const blocker = db.dataSource.createQueryRunner();
    await blocker.connect();
    await blocker.startTransaction();
    await blocker.query(`SELECT 1 FROM tenants WHERE id = 'racing' FOR UPDATE`);
    const changes = Promise.all(
      Array.from({ length: n }, (_, i) =>
        updateTenantPolicy(db.dataSource.manager, 'racing', {
          set: { obligationOwner: `owner-${i}` },
          remove: [],
          by: `key_${i}`,
        }),
      ),
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    await blocker.commitTransaction();
    await blocker.release();
    await changes;
    const rows = await history('racing');
    expect(rows).toHaveLength(n);
    expect(new Set(rows.map((r) => r.changed_by)).size).toBe(n);
    for (const row of rows) expect(row.after.obligation_owner).toBe(`owner-${row.changed_by.slice(4)}`);
    const last = expectChain(rows, (s) => s.obligation_owner, null as unknown);
    expect((await loadTenantSettings(db.dataSource.manager, 'racing'))?.obligationOwner).toBe(last);
  });

  it('concurrent connector settings changes each get their own row, with the before each one really changed', async () => {
    const n = 8;
    await Promise.all(
      Array.from({ length: n }, (_, i) =>
        transaction(db.dataSource, (tx: EntityManager) =>
          changeConnectorSettings(tx, { tenantId: 'racing2', connector: 'http', by: `key_${i}` }, async () => {
            // Time for the others to read what they would call `before`, were the changes not taking turns.
            await new Promise((resolve) => setTimeout(resolve, 20));
            await upsertConnectorSettings(tx, 'racing2', 'http', {
              allowHosts: [{ host: `h${i}.example` }],
              by: `key_${i}`,
            });
          }),
        ),
      ),
    );
    const rows = await history('racing2');
    expect(rows).toHaveLength(n);
    for (const row of rows) expect(row.after.allow_hosts).toEqual([{ host: `h${row.changed_by.slice(4)}.example` }]);
    const last = expectChain(rows, (s) => s.allow_hosts, [] as unknown);
    const [stored] = (await db.dataSource.query(
      `SELECT allow_hosts FROM tenant_connector_settings WHERE tenant_id = 'racing2' AND connector = 'http'`,
    )) as { allow_hosts: unknown }[];
    expect(stored.allow_hosts).toEqual(last);
  });

  it('is append-only, per tenant, newest first, filtered by kind and connector, and paged by id', async () => {
    const [row] = await history('acme');
    await expect(
      db.dataSource.query(`UPDATE admin_changes SET changed_by = 'me' WHERE id = $1`, [row.id]),
    ).rejects.toThrow(/append-only/);
    await expect(db.dataSource.query(`DELETE FROM admin_changes WHERE id = $1`, [row.id])).rejects.toThrow(
      /append-only/,
    );
    expect(await history('other')).toEqual([]);
    const all = await history('acme');
    expect(all.map((r) => r.id)).toEqual([...all.map((r) => r.id)].sort().reverse());
    expect(
      (await listAdminChanges(db.dataSource.manager, { tenantId: 'acme', kind: 'policy', limit: 100 })).length,
    ).toBe(all.filter((r) => r.kind === 'policy').length);
    const http = await listAdminChanges(db.dataSource.manager, { tenantId: 'acme', connector: 'http', limit: 100 });
    expect(http.length).toBeGreaterThan(0);
    expect(http.every((r) => r.connector === 'http')).toBe(true);
    const page = await listAdminChanges(db.dataSource.manager, { tenantId: 'acme', before: all[1].id, limit: 100 });
    expect(page.map((r) => r.id)).toEqual(all.slice(2).map((r) => r.id));
  });
});
