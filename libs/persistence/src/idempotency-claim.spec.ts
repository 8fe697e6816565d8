import { randomUUID } from 'node:crypto';
import type { EntityManager } from 'typeorm';
import { insertExecution } from './store';
import { newId } from '@verity/platform';
import { useTestDatabase } from '../../../test/support/test-database';
import { idempotencyHolder } from './idempotency';
import { upsertConnectorSettings, writeConnectorSecret } from './connector-settings.repository';
import { SecretsCipher } from './secrets-cipher';

/**
 * I8 against the real Postgres: the intake statement takes the Idempotency-Key and writes the execution together. Of
 * concurrent requests with one key exactly one writes; a live record is never taken over, an expired one (or one an
 * older version left in flight for over a minute) is; a statement that wrote nothing holds nothing.
 */
describe('Idempotency-Key records written by the intake statement (real Postgres)', () => {
  const tenantId = 'acme';
  const db = useTestDatabase('idemclaim', [tenantId]);

  /** One intake statement with `key`; through `manager` when given (a transaction left open by the test). */
  const insert = (
    key: string,
    options: { hash?: string; uncheckedCapsOf?: string[]; uncheckedSecretsOf?: string[]; manager?: EntityManager } = {},
  ) => {
    const id = newId('exe');
    return insertExecution(options.manager ?? db.dataSource.manager, {
      id,
      tenantId,
      agentId: 'agent',
      intent: 'pay',
      deadlineSeconds: 600,
      criteria: [],
      idempotencyKey: key,
      idempotency: { requestHash: options.hash ?? 'h1', ttlMs: 86_400_000, abandonAfterMs: 60_000 },
      operations: [],
      createdEventId: newId('evt'),
      uncheckedCapsOf: options.uncheckedCapsOf,
      uncheckedSecretsOf: options.uncheckedSecretsOf,
    }).then((written) => ({ id, written }));
  };

  const holder = (key: string, hash = 'h1') => idempotencyHolder(db.dataSource.manager, tenantId, key, hash, 60_000);

  const executionsWithKey = async (key: string) =>
    (
      (await db.dataSource.query(`SELECT id FROM executions WHERE tenant_id = $1 AND idempotency_key = $2`, [
        tenantId,
        key,
      ])) as { id: string }[]
    ).map((r) => r.id);

  const eventsOf = async (executionId: string) =>
    (
      (await db.dataSource.query(`SELECT count(*)::int AS n FROM events WHERE execution_id = $1`, [executionId])) as {
        n: number;
      }[]
    )[0].n;

  it('writes the record with the execution; a second request with the key writes nothing and learns what holds it', async () => {
    const key = `k-${randomUUID()}`;
    expect(await holder(key)).toBeNull();
    const first = await insert(key);
    expect(first.written).toMatchObject({ createdAt: expect.any(Date) });
    expect(await holder(key)).toEqual({ kind: 'replay', executionId: first.id });

    const again = await insert(key);
    expect(again.written).toBeNull();
    expect(await eventsOf(again.id)).toBe(0);
    const other = await insert(key, { hash: 'h2' });
    expect(other.written).toBeNull();
    expect(await holder(key, 'h2')).toEqual({ kind: 'mismatch' });
    expect(await executionsWithKey(key)).toEqual([first.id]);
  });

  it('of concurrent requests with one key, exactly one writes; the others answer busy, or find its record', async () => {
    const key = `k-${randomUUID()}`;
    const attempts = await Promise.all(Array.from({ length: 12 }, () => insert(key)));
    const writers = attempts.filter((a) => a.written !== null && typeof a.written === 'object');
    expect(writers).toHaveLength(1);
    for (const other of attempts.filter((a) => a !== writers[0])) expect([null, 'busy']).toContain(other.written);
    expect(await executionsWithKey(key)).toEqual([writers[0].id]);
    expect(await holder(key)).toEqual({ kind: 'replay', executionId: writers[0].id });
  });

  it('answers busy, without waiting, while another request with the key is inside its statement', async () => {
    const key = `k-${randomUUID()}`;
    const first = db.dataSource.createQueryRunner();
    await first.connect();
    try {
      await first.startTransaction();
      const { id, written } = await insert(key, { manager: first.manager });
      expect(written).toMatchObject({ createdAt: expect.any(Date) });
      // Not committed yet: a second request neither waits for it nor writes.
      expect((await insert(key)).written).toBe('busy');
      expect(await holder(key)).toBeNull();
      await first.commitTransaction();
      expect((await insert(key)).written).toBeNull();
      expect(await holder(key)).toEqual({ kind: 'replay', executionId: id });
    } finally {
      await first.release();
    }
  });

  it('takes over an expired record, and an in-flight one abandoned for over a minute — never a live one', async () => {
    const key = `k-${randomUUID()}`;
    const first = await insert(key);
    await db.dataSource.query(
      `UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE tenant_id = $1 AND key = $2`,
      [tenantId, key],
    );
    // What intake would take over holds nothing: the caller does not answer from it.
    expect(await holder(key)).toBeNull();
    const after = await insert(key, { hash: 'h2' });
    expect(after.written).not.toBeNull();
    expect(await holder(key, 'h2')).toEqual({ kind: 'replay', executionId: after.id });
    expect((await executionsWithKey(key)).sort()).toEqual([first.id, after.id].sort());

    // A record an older version left in flight: answered "in flight" while recent, taken over once abandoned.
    const stuck = `k-${randomUUID()}`;
    await db.dataSource.query(
      `INSERT INTO idempotency_keys (tenant_id, key, request_hash, state, expires_at)
       VALUES ($1, $2, 'h1', 'in_flight', now() + interval '1 hour')`,
      [tenantId, stuck],
    );
    expect((await insert(stuck)).written).toBeNull();
    expect(await holder(stuck)).toEqual({ kind: 'in_flight' });
    await db.dataSource.query(
      `UPDATE idempotency_keys SET created_at = now() - interval '2 minutes' WHERE tenant_id = $1 AND key = $2`,
      [tenantId, stuck],
    );
    expect(await holder(stuck)).toBeNull();
    const taken = await insert(stuck);
    expect(taken.written).not.toBeNull();
    expect(await holder(stuck)).toEqual({ kind: 'replay', executionId: taken.id });
  });

  it("keeps the key for the TTL, or until the execution's deadline when that is later", async () => {
    const keptFor = async (ttlMs: number, deadlineSeconds: number) => {
      const key = `kept-${randomUUID()}`;
      await insertExecution(db.dataSource.manager, {
        id: newId('exe'),
        tenantId,
        agentId: 'agent',
        intent: 'pay',
        deadlineSeconds,
        criteria: [],
        idempotencyKey: key,
        idempotency: { requestHash: 'h1', ttlMs, abandonAfterMs: 60_000 },
        operations: [],
        createdEventId: newId('evt'),
      });
      const [row] = (await db.dataSource.query(
        `SELECT extract(epoch FROM expires_at - created_at)::int AS s FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`,
        [tenantId, key],
      )) as { s: number }[];
      return row.s;
    };
    expect(await keptFor(86_400_000, 600)).toBe(86_400);
    // A week-long execution outlives a day's TTL: its key lives as long, so a repeat within it replays, never re-sends.
    expect(await keptFor(86_400_000, 7 * 86_400)).toBe(7 * 86_400);
    expect(await keptFor(1_000, 120)).toBe(120);
  });

  it('writes nothing and takes no key while an amount cap on the connectors is unchecked', async () => {
    await upsertConnectorSettings(db.dataSource.manager, tenantId, 'sandbox.payments', {
      spendingCaps: [{ period: 'day', max_amount: 1000, amount_field: 'amount' }],
      by: 'test',
    });
    await upsertConnectorSettings(db.dataSource.manager, tenantId, 'http', {
      spendingCaps: [{ period: 'day', max_operations: 5 }],
      by: 'test',
    });
    const key = `k-${randomUUID()}`;
    const refused = await insert(key, { uncheckedCapsOf: ['http', 'sandbox.payments'] });
    expect(refused.written).toEqual({ unchecked: { caps: true, secrets: false } });
    expect(await executionsWithKey(key)).toEqual([]);
    expect(await holder(key)).toBeNull();

    // A cap that counts operations only asks nothing of intake; checked caps (omitted) write at once.
    const other = `k-${randomUUID()}`;
    expect((await insert(other, { uncheckedCapsOf: ['http'] })).written).toMatchObject({ createdAt: expect.any(Date) });
    const checked = await insert(key);
    expect(checked.written).toMatchObject({ createdAt: expect.any(Date) });
    expect(await executionsWithKey(key)).toEqual([checked.id]);
    expect(await holder(key)).toEqual({ kind: 'replay', executionId: checked.id });
  });

  it('writes nothing and takes no key while the tenant has a secret for a connector whose secrets are unchecked', async () => {
    const key = `k-${randomUUID()}`;
    // No secret yet: nothing to look for, written at once.
    expect((await insert(`k-${randomUUID()}`, { uncheckedSecretsOf: ['http'] })).written).toMatchObject({
      createdAt: expect.any(Date),
    });
    await writeConnectorSecret(
      db.dataSource.manager,
      new SecretsCipher(undefined),
      tenantId,
      'http',
      'token',
      'v',
      'test',
    );
    expect((await insert(key, { uncheckedSecretsOf: ['http'] })).written).toEqual({
      unchecked: { caps: false, secrets: true },
    });
    expect(await executionsWithKey(key)).toEqual([]);
    expect(await holder(key)).toBeNull();
    // A secret of another connector asks nothing; looked for (omitted), written.
    expect((await insert(key, { uncheckedSecretsOf: ['sandbox.payments'] })).written).toMatchObject({
      createdAt: expect.any(Date),
    });
    expect(await executionsWithKey(key)).toHaveLength(1);
  });

  it('refuses a key without its request hash (and a hash without a key)', async () => {
    await expect(
      insertExecution(db.dataSource.manager, {
        id: newId('exe'),
        tenantId,
        agentId: 'agent',
        intent: 'pay',
        deadlineSeconds: 600,
        criteria: [],
        idempotencyKey: 'k',
        operations: [],
        createdEventId: newId('evt'),
      }),
    ).rejects.toThrow(/Idempotency-Key/);
  });
});
