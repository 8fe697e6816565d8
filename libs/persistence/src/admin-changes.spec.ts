import type { EntityManager } from 'typeorm';
import { lockWaiters, waitForLockWaiter, writeDuringRevocation } from '../../../test/support/lock-waits';
import { waitFor } from '../../../test/support/stack';
import { insertStandingKeys } from '../../../test/support/fixtures';
import { useTestDatabase } from '../../../test/support/test-database';
import { AdminChangeRow, listAdminChanges } from './admin-changes';
import {
  StaleConnectorSettings,
  changeConnectorSettings,
  clearConnectorSettings,
  connectorSettingsVersion,
  deleteConnectorSecret,
  upsertConnectorSettings,
  writeConnectorSecret,
} from './connector-settings.repository';
import { SecretsCipher } from './secrets-cipher';
import { Queryable, rows, transaction } from './sql';
import { TENANT_POLICY_SQL, loadTenantSettings, updateTenantPolicy } from './tenant-policy';
import {
  MAX_WEBHOOK_ENDPOINTS,
  createWebhookEndpoint,
  deleteWebhookEndpoint,
  enableWebhookEndpoint,
  findWebhookEndpoint,
  recordWebhookAttempt,
  listWebhookEndpoints,
} from './webhooks';
import { KeyRevokedError, revokeApiKey } from './api-keys';

/**
 * The history of admin changes is written with the change itself: the policy's by its UPDATE statement, a connector's
 * settings in the transaction that writes them. A change that fails leaves no row; concurrent changes each get their
 * own row, whose `before` is exactly what the change before it left. Secret values are never in it.
 */
describe('admin change history (real Postgres)', () => {
  const db = useTestDatabase('adminchanges', [
    'acme',
    'other',
    'racing',
    'racing2',
    'hooks',
    'hooksfull',
    'hooksrace',
    'hooksstorm',
    'ordered',
    'revoking',
    'rotating',
  ]);
  // The keys the changes below are made by: a change is written only while its key stands.
  beforeAll(async () =>
    insertStandingKeys(db.dataSource.manager, 'acme', [
      'k',
      'key_a',
      'key_b',
      'key_admin',
      'key_creator',
      'key_deleter',
      'key_enabler',
      'key_first',
      'key_lifter',
      'key_other',
      ...Array.from({ length: 10 }, (_, i) => `key_${i}`),
    ]),
  );
  // No SECRETS_KEY: the secret is stored as it is, so a history that read the column would hold it in clear.
  const cipher = new SecretsCipher(undefined);
  const SECRET = 'sk_live_history-must-never-hold-this';

  const history = async (tenantId: string): Promise<AdminChangeRow[]> =>
    listAdminChanges(db.dataSource.manager, { tenantId, limit: 1000 });
  /** A whole history row: what changed and by whom, as the test names it, with a fresh chg_ id and a time. */
  const recordedChange = (change: Omit<AdminChangeRow, 'id' | 'changed_at'>) => ({
    id: expect.stringMatching(/^chg_/),
    ...change,
    changed_at: expect.any(Date),
  });

  /** A Queryable that counts the statements sent through it. */
  function counting(target: Queryable): { db: Queryable; sent: () => number } {
    let sent = 0;
    // Seen as a transaction's manager when `target` is one (so a change runs in it); its statements all go through
    // `query`, where they are counted (no connection of its own to prepare them on).
    const inTransaction = (target as Partial<EntityManager>).queryRunner?.isTransactionActive === true;
    return {
      db: {
        query: (sql: string, params?: unknown[]) => {
          sent += 1;
          return target.query(sql, params);
        },
        ...(inTransaction && { queryRunner: { isTransactionActive: true } }),
      } as unknown as Queryable,
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

  it('a policy change writes exactly one row, by the statement that changes it (after the lock), with before, after and who', async () => {
    await updateTenantPolicy(db.dataSource.manager, 'acme', {
      set: { approvalRules: [{ connector: 'sandbox.payments', amount_above: 5000 }] },
      remove: [],
      by: 'key_first',
    });
    // In the caller's transaction: the key's lock (it must still stand), the policy's lock, then the one statement
    // that changes the row and records it.
    const written = await transaction(db.dataSource, async (tx) => {
      const probe = counting(tx);
      const changed = await updateTenantPolicy(probe.db, 'acme', {
        set: { obligationOwner: 'payments' },
        remove: ['approvalRules'],
        by: 'key_lifter',
      });
      expect(probe.sent()).toBe(3);
      return changed;
    });
    expect(written?.obligationOwner).toBe('payments');
    const rows = await history('acme');
    expect(rows).toHaveLength(2);
    const lifted = rows.find((r) => r.changed_by === 'key_lifter');
    expect(lifted).toEqual(
      recordedChange({
        kind: 'policy',
        connector: null,
        changed_by: 'key_lifter',
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
      }),
    );
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
          allowHosts: [{ host: 'api.example.com', ports: [443], secrets: ['api_token'] }],
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
        // The secrets an entry binds are part of the allowlist as recorded (names, like the secrets' own list).
        allow_hosts: [{ host: 'api.example.com', ports: [443], secrets: ['api_token'] }],
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

  it('a secret rotated moves the version: of two rotations made against one version (If-Match), the second is refused', async () => {
    const rotate = (value: string, by: string, ifMatch?: string[]) =>
      transaction(db.dataSource, (tx) =>
        changeConnectorSettings(tx, { tenantId: 'rotating', connector: 'http', by, ifMatch }, () =>
          writeConnectorSecret(tx, cipher, 'rotating', 'http', 'api_token', value, by),
        ),
      );
    const version = () => connectorSettingsVersion(db.dataSource.manager, 'rotating', 'http');
    await rotate('sk_first', 'key_admin');
    const seen = await version();
    // Two admins read the settings at `seen`, each rotates the token: the first is made, the second refused.
    await rotate('sk_by_a', 'key_a', [seen]);
    const afterA = await version();
    expect(afterA).not.toBe(seen);
    await expect(rotate('sk_by_b', 'key_b', [seen])).rejects.toBeInstanceOf(StaleConnectorSettings);
    const stored = (await db.dataSource.query(
      `SELECT value, updated_by FROM tenant_connector_secrets WHERE tenant_id = 'rotating' AND name = 'api_token'`,
    )) as { value: string; updated_by: string }[];
    expect(stored).toEqual([{ value: 'sk_by_a', updated_by: 'key_a' }]);
    // No digest of the value: writing the same value again moves the version, and a version is no function of it.
    await rotate('sk_by_a', 'key_a', [afterA]);
    expect(await version()).not.toBe(afterA);
    // A read-only version is stable, and a write of the same settings (no secret) keeps it.
    const now = await version();
    expect(await version()).toBe(now);
    await transaction(db.dataSource, (tx) =>
      changeConnectorSettings(tx, { tenantId: 'rotating', connector: 'http', by: 'key_a', ifMatch: [now] }, () =>
        upsertConnectorSettings(tx, 'rotating', 'http', { by: 'key_a' }),
      ),
    );
    expect(await version()).toBe(now);
  });

  it('a secret rotated is in its history row: when the named secret was written, before and after, never its value', async () => {
    const rotate = (value: string, by: string) =>
      transaction(db.dataSource, (tx) =>
        changeConnectorSettings(tx, { tenantId: 'rotating', connector: 'sandbox.sms', by }, () =>
          writeConnectorSecret(tx, cipher, 'rotating', 'sandbox.sms', 'sms_token', value, by),
        ),
      );
    const rowsOf = async () =>
      (await history('rotating')).filter((r) => r.kind === 'connector_settings' && r.connector === 'sandbox.sms');
    const writtenAt = async () => {
      const [row] = (await db.dataSource.query(
        `SELECT to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at
           FROM tenant_connector_secrets WHERE tenant_id = 'rotating' AND connector = 'sandbox.sms'`,
      )) as { at: string }[];
      return row.at;
    };
    await rotate(`${SECRET}-1`, 'key_admin');
    const first = await writtenAt();
    const [set] = await rowsOf();
    expect(set).toMatchObject({
      before: { secrets: [], secrets_written_at: {} },
      after: { secrets: ['sms_token'], secrets_written_at: { sms_token: first } },
    });
    await rotate(`${SECRET}-2`, 'key_a');
    const second = await writtenAt();
    expect(second > first).toBe(true);
    const [rotated] = await rowsOf();
    // The names alone are the same on both sides: the entry says which secret was written again, by whom and when.
    expect(rotated).toEqual(
      recordedChange({
        kind: 'connector_settings',
        connector: 'sandbox.sms',
        changed_by: 'key_a',
        before: {
          allow_hosts: [],
          spending_caps: [],
          read_back_binding: 'declared',
          secrets: ['sms_token'],
          secrets_written_at: { sms_token: first },
        },
        after: {
          allow_hosts: [],
          spending_caps: [],
          read_back_binding: 'declared',
          secrets: ['sms_token'],
          secrets_written_at: { sms_token: second },
        },
      }),
    );
    const everything = (await db.dataSource.query(`SELECT row_to_json(c)::text AS t FROM admin_changes c`)) as {
      t: string;
    }[];
    expect(everything.map((r) => r.t).join('\n')).not.toContain(SECRET);
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
  function expectChain<T>(rows: AdminChangeRow[], read: (settings: Record<string, unknown> | null) => T, start: T): T {
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
    const changes = allWaiting(
      Array.from({ length: n }, (_, i) =>
        updateTenantPolicy(db.dataSource.manager, 'racing', {
          set: { obligationOwner: `owner-${i}` },
          remove: [],
          by: `key_${i}`,
        }),
      ),
    );
    await changes.waiting;
    await blocker.commitTransaction();
    await blocker.release();
    await changes.all;
    const rows = await history('racing');
    expect(rows).toHaveLength(n);
    expect(new Set(rows.map((r) => r.changed_by)).size).toBe(n);
    for (const row of rows) expect(row.after?.obligation_owner).toBe(`owner-${row.changed_by.slice(4)}`);
    const last = expectChain(rows, (s) => s?.obligation_owner, null as unknown);
    expect((await loadTenantSettings(db.dataSource.manager, 'racing'))?.obligationOwner).toBe(last);
  });

  it('concurrent connector settings changes each get their own row, with the before each one really changed', async () => {
    const n = 8;
    let finished = 0;
    let writing = 0;
    await Promise.all(
      Array.from({ length: n }, (_, i) =>
        transaction(db.dataSource, (tx: EntityManager) =>
          changeConnectorSettings(tx, { tenantId: 'racing2', connector: 'http', by: `key_${i}` }, async () => {
            // Every other change has had its turn, waits on a lock for it, or (were the changes not taking turns) has
            // read what it calls `before` and is writing too.
            writing += 1;
            try {
              await waitFor(
                async () => finished + (writing - 1) + (await lockWaiters(db.dataSource)),
                (others) => others >= n - 1,
              );
              await upsertConnectorSettings(tx, 'racing2', 'http', {
                allowHosts: [{ host: `h${i}.example` }],
                by: `key_${i}`,
              });
            } finally {
              writing -= 1;
            }
          }),
        ).finally(() => (finished += 1)),
      ),
    );
    const rows = await history('racing2');
    expect(rows).toHaveLength(n);
    for (const row of rows) expect(row.after?.allow_hosts).toEqual([{ host: `h${row.changed_by.slice(4)}.example` }]);
    const last = expectChain(rows, (s) => s?.allow_hosts, [] as unknown);
    const [stored] = (await db.dataSource.query(
      `SELECT allow_hosts FROM tenant_connector_settings WHERE tenant_id = 'racing2' AND connector = 'http'`,
    )) as { allow_hosts: unknown }[];
    expect(stored.allow_hosts).toEqual(last);
  });

  /** The rows `change` added to the tenant's history (the test asserts how many). */
  async function addedBy(tenantId: string, change: () => Promise<unknown>): Promise<AdminChangeRow[]> {
    const known = new Set((await history(tenantId)).map((r) => r.id));
    await change();
    return (await history(tenantId)).filter((r) => !known.has(r.id));
  }

  /** Every row of the table, whatever column or shape, as text: a secret must be in none of it. */
  async function wholeHistoryText(): Promise<string> {
    const everything = (await db.dataSource.query(`SELECT row_to_json(c)::text AS t FROM admin_changes c`)) as {
      t: string;
    }[];
    return everything.map((r) => r.t).join('\n');
  }

  const newEndpoint = (tenantId: string, by = 'key_admin', path = '/hook') =>
    createWebhookEndpoint(db.dataSource, cipher, {
      tenantId,
      url: `https://hooks.example.com${path}`,
      events: ['execution.finished', 'operation.settled'],
      createdBy: by,
    });

  /** As the delivery worker does it: one failed delivery that disables the endpoint (disableAfter 1). */
  async function failDeliveryUntilDisabled(tenantId: string, endpointId: string): Promise<void> {
    const deliveryId = `msg_${endpointId}`;
    await db.dataSource.query(
      `INSERT INTO webhook_deliveries (id, endpoint_id, tenant_id, event_id, type, payload)
       VALUES ($1, $2, $3, NULL, 'execution.finished', '{}')`,
      [deliveryId, endpointId, tenantId],
    );
    const recorded = await recordWebhookAttempt(db.dataSource, {
      deliveryId,
      round: 0,
      outcome: { ok: false, status: 500, error: 'HTTP 500' },
      final: true,
      disableAfter: 1,
    });
    expect(recorded.disabled).toBeDefined();
  }

  it('a webhook endpoint created, disabled by the worker, enabled and deleted: one row per admin change, no secret', async () => {
    let made: Awaited<ReturnType<typeof newEndpoint>> = null;
    const added = await addedBy('hooks', async () => (made = await newEndpoint('hooks', 'key_creator')));
    expect(added).toHaveLength(1);
    const [created] = added;
    const { secret, endpoint } = made!;
    const endpointId = endpoint.id;
    expect(secret).toMatch(/^whsec_/);
    const configured = {
      id: endpointId,
      url: 'https://hooks.example.com/hook',
      events: ['execution.finished', 'operation.settled'],
    };
    expect(created).toEqual(
      recordedChange({
        kind: 'webhook_endpoint',
        connector: null,
        changed_by: 'key_creator',
        before: null,
        after: { ...configured, disabled: false, disabled_reason: null },
      }),
    );

    // The worker's disable is the system's act, not an admin's: no row (the entry needs the key that made it).
    expect(await addedBy('hooks', () => failDeliveryUntilDisabled('hooks', endpointId))).toEqual([]);
    const disabled = await findWebhookEndpoint(db.dataSource.manager, 'hooks', endpointId);
    expect(disabled?.disabled_reason).toMatch(/consecutive deliveries failed/);

    const enabled = await addedBy('hooks', () =>
      enableWebhookEndpoint(db.dataSource.manager, { tenantId: 'hooks', id: endpointId, by: 'key_enabler' }),
    );
    expect(enabled).toEqual([
      expect.objectContaining({
        kind: 'webhook_endpoint',
        connector: null,
        changed_by: 'key_enabler',
        before: { ...configured, disabled: true, disabled_reason: disabled!.disabled_reason },
        after: { ...configured, disabled: false, disabled_reason: null },
      }),
    ]);

    const deleted = await addedBy('hooks', async () => {
      expect(
        await deleteWebhookEndpoint(db.dataSource.manager, { tenantId: 'hooks', id: endpointId, by: 'key_deleter' }),
      ).toBe(true);
    });
    expect(deleted).toEqual([
      expect.objectContaining({
        kind: 'webhook_endpoint',
        connector: null,
        changed_by: 'key_deleter',
        before: { ...configured, disabled: false, disabled_reason: null },
        after: null,
      }),
    ]);
    // The history outlives the endpoint: created, enabled, deleted, newest first.
    expect((await history('hooks')).map((r) => r.changed_by)).toEqual(['key_deleter', 'key_enabler', 'key_creator']);
    // No secret (no SECRETS_KEY: the column held it in clear), in no row of the table, in no shape.
    const text = await wholeHistoryText();
    expect(text).not.toContain(secret);
    expect(text).not.toContain(secret.slice('whsec_'.length));
    expect(text).not.toContain('whsec_');
  });

  it('a webhook endpoint change that is refused or fails writes no row (and changes nothing)', async () => {
    const { endpoint } = (await newEndpoint('hooksfull'))!;
    const change = { tenantId: 'hooksfull', id: endpoint.id, by: 'k' };
    const endpoints = () => db.dataSource.query(`SELECT * FROM webhook_endpoints WHERE tenant_id = 'hooksfull'`);
    const stored = await endpoints();
    expect(stored).toHaveLength(1);

    // Failed: a change that cannot be recorded is not made.
    for (const attempt of [
      () => newEndpoint('hooksfull'),
      () => enableWebhookEndpoint(db.dataSource.manager, change),
      () => deleteWebhookEndpoint(db.dataSource.manager, change),
    ]) {
      expect(String(await withHistoryBroken(attempt))).toMatch(/history refused/);
    }
    expect(await endpoints()).toEqual(stored);
    expect(await history('hooksfull')).toHaveLength(1);

    // Refused: the tenant already has as many endpoints as it may.
    for (let i = 1; i < MAX_WEBHOOK_ENDPOINTS; i += 1) expect(await newEndpoint('hooksfull')).not.toBeNull();
    expect(await history('hooksfull')).toHaveLength(MAX_WEBHOOK_ENDPOINTS);
    expect(await addedBy('hooksfull', async () => expect(await newEndpoint('hooksfull')).toBeNull())).toEqual([]);

    // No such endpoint, or another tenant's: nothing deleted or enabled, nothing recorded.
    for (const [tenantId, id] of [
      ['hooksfull', 'whk_nope'],
      ['hooks', endpoint.id],
    ]) {
      expect(await deleteWebhookEndpoint(db.dataSource.manager, { tenantId, id, by: 'k' })).toBe(false);
      expect(await enableWebhookEndpoint(db.dataSource.manager, { tenantId, id, by: 'k' })).toBeNull();
    }
    expect(await history('hooksfull')).toHaveLength(MAX_WEBHOOK_ENDPOINTS);
    expect(await history('hooks')).toHaveLength(3);
    expect(await endpoints()).toHaveLength(MAX_WEBHOOK_ENDPOINTS);
  });

  /** Holds an endpoint's row while `changes` start, so all of them wait on it, then lets them go. */
  async function allAtOnce<T>(endpointId: string, changes: () => Promise<T>[]): Promise<T[]> {
    const blocker = db.dataSource.createQueryRunner();
    await blocker.connect();
    await blocker.startTransaction();
    await blocker.query(`SELECT 1 FROM webhook_endpoints WHERE id = $1 FOR UPDATE`, [endpointId]);
    const started = allWaiting(changes());
    await started.waiting;
    await blocker.commitTransaction();
    await blocker.release();
    return started.all;
  }

  /**
   * `changes`, and when each of them waits on a lock (its backend shows the wait in this database) or has finished:
   * then all of them started before any could change anything. A fixed pause instead let a loaded machine start some
   * after the blocker was gone, and the race the test is about was not run.
   */
  function allWaiting<T>(changes: Promise<T>[]): { waiting: Promise<void>; all: Promise<T[]> } {
    let finished = 0;
    const all = Promise.all(changes.map((change) => change.finally(() => (finished += 1))));
    // Its rejection is the caller's (it awaits `all`); until then it is not an unhandled one.
    all.catch(() => undefined);
    const waiting = waitFor(
      async () => finished + (await lockWaiters(db.dataSource)),
      (n) => n >= changes.length,
    ).then(() => undefined);
    return { waiting, all };
  }

  it('a delete while the delivery worker records an attempt (its delivery, then its endpoint) waits for it and deletes', async () => {
    const { endpoint } = (await newEndpoint('hooksrace', 'key_creator', '/while-recording'))!;
    const deliveryId = `msg_rec_${endpoint.id}`;
    await db.dataSource.query(
      `INSERT INTO webhook_deliveries (id, endpoint_id, tenant_id, event_id, type, payload)
       VALUES ($1, $2, 'hooksrace', NULL, 'execution.finished', '{}')`,
      [deliveryId, endpoint.id],
    );
    // The worker's transaction, stopped between its two steps (recordWebhookAttempt's order).
    const worker = db.dataSource.createQueryRunner();
    await worker.connect();
    await worker.startTransaction();
    try {
      await worker.query(`UPDATE webhook_deliveries SET attempts = attempts + 1 WHERE id = $1`, [deliveryId]);
      const deleting = deleteWebhookEndpoint(db.dataSource.manager, {
        tenantId: 'hooksrace',
        id: endpoint.id,
        by: 'key_deleter',
      }).then(
        (deleted) => ({ deleted }),
        (error: unknown) => ({ error: String(error) }),
      );
      // The delete waits on a lock the worker holds.
      await waitForLockWaiter(db.dataSource);
      await worker.query(`UPDATE webhook_endpoints SET consecutive_failures = consecutive_failures + 1 WHERE id = $1`, [
        endpoint.id,
      ]);
      await worker.commitTransaction();
      expect(await deleting).toEqual({ deleted: true });
    } finally {
      if (worker.isTransactionActive) await worker.rollbackTransaction();
      await worker.release();
    }
  });

  it('two deletes of one endpoint at once: one deletes it and has the one row, the other finds nothing', async () => {
    const { endpoint } = (await newEndpoint('hooksrace', 'key_creator', '/race'))!;
    const added = await addedBy('hooksrace', async () => {
      const results = await allAtOnce(endpoint.id, () =>
        ['key_a', 'key_b'].map((by) =>
          deleteWebhookEndpoint(db.dataSource.manager, { tenantId: 'hooksrace', id: endpoint.id, by }),
        ),
      );
      expect(results.sort()).toEqual([false, true]);
    });
    expect(added).toHaveLength(1);
    expect(added[0]).toMatchObject({ kind: 'webhook_endpoint', before: { id: endpoint.id }, after: null });
  });

  it('enables of one endpoint at once each get their own row, with the before each one really changed', async () => {
    const { endpoint } = (await newEndpoint('hooksrace', 'key_creator', '/race2'))!;
    await failDeliveryUntilDisabled('hooksrace', endpoint.id);
    const n = 4;
    const added = await addedBy('hooksrace', () =>
      allAtOnce(endpoint.id, () =>
        Array.from({ length: n }, (_, i) =>
          enableWebhookEndpoint(db.dataSource.manager, { tenantId: 'hooksrace', id: endpoint.id, by: `key_${i}` }),
        ),
      ),
    );
    expect(added).toHaveLength(n);
    expect(new Set(added.map((r) => r.changed_by)).size).toBe(n);
    // One of them found it disabled; the others found it enabled by the one before.
    expect(added.filter((r) => r.before?.disabled === true)).toHaveLength(1);
    expect(expectChain(added, (s) => s?.disabled, true as unknown)).toBe(false);
  });

  it('ten enables of one endpoint at once, round after round: none fails, each has its row', async () => {
    // Meanwhile the outbox writes deliveries to it (a key share lock on the row, as subscribedEndpoints takes). A
    // single statement that locked the row in a subquery and updated it in its outer scan deadlocked here: its older
    // snapshot made it follow the row's update chain, and queue for the tuple lock a waiter held while it waited for
    // this statement's transaction. The admin got a 500.
    const { endpoint } = (await newEndpoint('hooksstorm', 'key_creator', '/storm'))!;
    const rounds = 10;
    const n = 10;
    let outboxRuns = true;
    const outbox = (async () => {
      while (outboxRuns) {
        await transaction(db.dataSource, async (tx) => {
          await tx.query(`SELECT 1 FROM webhook_endpoints WHERE id = $1 FOR KEY SHARE`, [endpoint.id]);
          await tx.query(`SELECT pg_sleep(0.002)`);
        });
      }
    })();
    const added = await addedBy('hooksstorm', async () => {
      for (let round = 0; round < rounds; round += 1) {
        const results = await Promise.allSettled(
          Array.from({ length: n }, (_, i) =>
            enableWebhookEndpoint(db.dataSource.manager, { tenantId: 'hooksstorm', id: endpoint.id, by: `key_${i}` }),
          ),
        );
        expect(
          results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason)),
        ).toEqual([]);
      }
    }).finally(() => {
      outboxRuns = false;
    });
    await outbox;
    expect(added).toHaveLength(rounds * n);
  });

  it('ten policy changes at once while executions are written for the tenant: none fails, each has its row', async () => {
    // Every execution written takes a key share lock on its tenant's row (the foreign key): the same deadlock as the
    // endpoint's above, for a policy changed by one statement that locked and updated the row.
    let intakeRuns = true;
    const intake = (async () => {
      while (intakeRuns) {
        await transaction(db.dataSource, async (tx) => {
          await tx.query(`SELECT 1 FROM tenants WHERE id = 'racing2' FOR KEY SHARE`);
          await tx.query(`SELECT pg_sleep(0.002)`);
        });
      }
    })();
    const rounds = 10;
    const n = 10;
    try {
      for (let round = 0; round < rounds; round += 1) {
        const results = await Promise.allSettled(
          Array.from({ length: n }, (_, i) =>
            updateTenantPolicy(db.dataSource.manager, 'racing2', {
              set: { obligationOwner: `owner-${round}-${i}` },
              remove: [],
              by: `key_${i}`,
            }),
          ),
        );
        expect(
          results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason)),
        ).toEqual([]);
      }
    } finally {
      intakeRuns = false;
      await intake;
    }
    expect((await history('racing2')).length).toBeGreaterThanOrEqual(rounds * n);
  });

  it('a change by a key revoked before it is written is not made and leaves no row, also a revocation under way', async () => {
    const during = Array.from({ length: 5 }, (_, i) => `key_revoked_during_${i}`);
    await insertStandingKeys(db.dataSource.manager, 'revoking', ['key_revoked_first', ...during]);
    expect(await revokeApiKey(db.dataSource.manager, 'key_revoked_first')).toBe(true);
    const { endpoint } = (await newEndpoint('revoking', 'key_admin', '/revoked'))!;
    const endpointsBefore = await listWebhookEndpoints(db.dataSource.manager, 'revoking');
    // Each admin change of the history: the policy, a connector's settings, a webhook endpoint's create, enable, delete.
    const changesBy = (by: string) => [
      () => updateTenantPolicy(db.dataSource.manager, 'revoking', { set: { obligationOwner: by }, remove: [], by }),
      () =>
        transaction(db.dataSource, (tx) =>
          changeConnectorSettings(tx, { tenantId: 'revoking', connector: 'http', by }, () =>
            upsertConnectorSettings(tx, 'revoking', 'http', { allowHosts: [{ host: 'exfil.example.com' }], by }),
          ),
        ),
      () =>
        createWebhookEndpoint(db.dataSource, cipher, {
          tenantId: 'revoking',
          url: 'https://exfil.example.com/hook',
          events: ['operation.settled'],
          createdBy: by,
        }),
      () => enableWebhookEndpoint(db.dataSource.manager, { tenantId: 'revoking', id: endpoint.id, by }),
      () => deleteWebhookEndpoint(db.dataSource.manager, { tenantId: 'revoking', id: endpoint.id, by }),
    ];
    const added = await addedBy('revoking', async () => {
      // Revoked (committed) after the request was admitted on it.
      for (const change of changesBy('key_revoked_first')) await expect(change()).rejects.toThrow(KeyRevokedError);
      // Revoked while the change runs: written, not committed, when the change starts. The change waits for it (the
      // key's row is share-locked), and once it commits finds the key revoked.
      for (let i = 0; i < during.length; i += 1) {
        const by = during[i];
        // Proven waiting on the revocation's row lock (not slept on), or done without waiting (its result tells).
        await expect(writeDuringRevocation<unknown>(db.dataSource, by, changesBy(by)[i])).rejects.toThrow(
          KeyRevokedError,
        );
      }
    });
    expect(added).toEqual([]);
    expect((await loadTenantSettings(db.dataSource.manager, 'revoking'))?.obligationOwner).toBeUndefined();
    expect(await listWebhookEndpoints(db.dataSource.manager, 'revoking')).toEqual(endpointsBefore);
  });

  it('lists changes in the order they were written, whatever the order of their ids', async () => {
    // A policy change mints its id before its statement waits for the tenant's row: of changes made at once, the one
    // that waited longest can carry the smallest id. Written here with ids in the opposite order of the writes.
    const ids = ['chg_zzzzzzzzzzzzzzzzzzzzzzzz', 'chg_mmmmmmmmmmmmmmmmmmmmmmmm', 'chg_000000000000000000000000'];
    for (const [i, id] of ids.entries()) {
      const set = JSON.stringify({ obligationOwner: `owner-${i}` });
      await transaction(db.dataSource, async (tx) => {
        const [locked] = await rows<{ before: string }>(tx, TENANT_POLICY_SQL.lockPolicy, ['ordered']);
        await rows(tx, TENANT_POLICY_SQL.updatePolicy, ['ordered', [], set, id, 'key_admin', locked.before]);
      });
    }
    const listed = await listAdminChanges(db.dataSource.manager, { tenantId: 'ordered', limit: 10 });
    expect(listed.map((r) => r.id)).toEqual([...ids].reverse());
    // Each entry's before is what the one listed after it left: the chain reads in order.
    expect(listed.map((r) => [r.before?.obligation_owner ?? null, r.after?.obligation_owner])).toEqual([
      ['owner-1', 'owner-2'],
      ['owner-0', 'owner-1'],
      [null, 'owner-0'],
    ]);
    // Paged in the same order: after the newest, the two older ones; after the oldest, nothing; an unknown id, nothing.
    const page = (before: string) =>
      listAdminChanges(db.dataSource.manager, { tenantId: 'ordered', before, limit: 10 });
    expect((await page(ids[2])).map((r) => r.id)).toEqual([ids[1], ids[0]]);
    expect(await page(ids[0])).toEqual([]);
    expect(await page('chg_unknown00000000000000000')).toEqual([]);
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
    const hooks = await listAdminChanges(db.dataSource.manager, {
      tenantId: 'hooks',
      kind: 'webhook_endpoint',
      limit: 100,
    });
    expect(hooks.map((r) => r.kind)).toEqual(['webhook_endpoint', 'webhook_endpoint', 'webhook_endpoint']);
    expect(
      await listAdminChanges(db.dataSource.manager, { tenantId: 'acme', kind: 'webhook_endpoint', limit: 100 }),
    ).toEqual([]);
    const http = await listAdminChanges(db.dataSource.manager, { tenantId: 'acme', connector: 'http', limit: 100 });
    expect(http.length).toBeGreaterThan(0);
    expect(http.every((r) => r.connector === 'http')).toBe(true);
    const page = await listAdminChanges(db.dataSource.manager, { tenantId: 'acme', before: all[1].id, limit: 100 });
    expect(page.map((r) => r.id)).toEqual(all.slice(2).map((r) => r.id));
  });
});
