import { randomUUID } from 'node:crypto';
import { insertExecution } from './store';
import { newId } from '@verity/platform';
import { useTestDatabase } from '../../../test/support/test-database';
import { claimIdempotencyKey, releaseIdempotencyKey } from './idempotency';
import { upsertConnectorSettings } from './connector-settings.repository';

/**
 * I8 against the real Postgres: a claim abandoned for a minute may be taken over by a retry, and then the first
 * request — if it was only slow — can neither create a second execution nor free the retry's claim.
 */
describe('Idempotency-Key claims (real Postgres)', () => {
  const tenantId = 'acme';
  const db = useTestDatabase('idemclaim', [tenantId]);

  const claim = (key: string) =>
    claimIdempotencyKey(db.dataSource.manager, {
      tenantId,
      key,
      hash: 'h1',
      ttlMs: 86_400_000,
      abandonAfterMs: 60_000,
    });

  const insert = (key: string, token: string, uncheckedCapsOf?: string[]) => {
    const id = newId('exe');
    return insertExecution(db.dataSource.manager, {
      id,
      tenantId,
      agentId: 'agent',
      intent: 'pay',
      deadlineSeconds: 600,
      criteria: [],
      idempotencyKey: key,
      claimToken: token,
      operations: [],
      createdEventId: newId('evt'),
      uncheckedCapsOf,
    }).then((written) => ({ id, written }));
  };

  const executionsWithKey = async (key: string) =>
    (
      (await db.dataSource.query(`SELECT id FROM executions WHERE tenant_id = $1 AND idempotency_key = $2`, [
        tenantId,
        key,
      ])) as { id: string }[]
    ).map((r) => r.id);

  it('lets only the request that holds the claim create the execution', async () => {
    const key = `k-${randomUUID()}`;
    const first = await claim(key);
    expect(first.kind).toBe('claimed');
    expect(await claim(key)).toEqual({ kind: 'in_flight' });

    // The first request stalls past the abandon window; a retry takes the claim over.
    await db.dataSource.query(
      `UPDATE idempotency_keys SET created_at = now() - interval '2 minutes' WHERE tenant_id = $1 AND key = $2`,
      [tenantId, key],
    );
    const retry = await claim(key);
    expect(retry.kind).toBe('claimed');
    if (first.kind !== 'claimed' || retry.kind !== 'claimed') throw new Error('unreachable');
    expect(retry.token).not.toBe(first.token);

    // The slow first request wakes up: it cannot free the retry's claim, nor write anything.
    await releaseIdempotencyKey(db.dataSource.manager, tenantId, key, first.token);
    expect(await claim(key)).toEqual({ kind: 'in_flight' });
    const late = await insert(key, first.token);
    expect(late.written).toBeNull();
    const [{ n }] = (await db.dataSource.query(`SELECT count(*)::int AS n FROM events WHERE execution_id = $1`, [
      late.id,
    ])) as { n: number }[];
    expect(n).toBe(0);

    const winner = await insert(key, retry.token);
    expect(winner.written).not.toBeNull();
    expect(await executionsWithKey(key)).toEqual([winner.id]);
    expect(await claim(key)).toEqual({ kind: 'replay', executionId: winner.id });
  });

  it('writes without a key as before, and frees a claim its own request gives up', async () => {
    const plain = await insertExecution(db.dataSource.manager, {
      id: newId('exe'),
      tenantId,
      agentId: 'agent',
      intent: 'pay',
      deadlineSeconds: 600,
      criteria: [],
      idempotencyKey: null,
      operations: [],
      createdEventId: newId('evt'),
    });
    expect(plain).not.toBeNull();

    const key = `k-${randomUUID()}`;
    const mine = await claim(key);
    if (mine.kind !== 'claimed') throw new Error(`expected a claim, got ${mine.kind}`);
    await releaseIdempotencyKey(db.dataSource.manager, tenantId, key, mine.token);
    expect((await claim(key)).kind).toBe('claimed');
  });

  it('writes nothing and answers capped while an amount cap on the connectors is unchecked; the claim stays open', async () => {
    await upsertConnectorSettings(db.dataSource.manager, tenantId, 'sandbox.payments', {
      spendingCaps: [{ period: 'day', max_amount: 1000, amount_field: 'amount' }],
      by: 'test',
    });
    await upsertConnectorSettings(db.dataSource.manager, tenantId, 'http', {
      spendingCaps: [{ period: 'day', max_operations: 5 }],
      by: 'test',
    });
    const key = `k-${randomUUID()}`;
    const mine = await claim(key);
    if (mine.kind !== 'claimed') throw new Error(`expected a claim, got ${mine.kind}`);

    const refused = await insert(key, mine.token, ['http', 'sandbox.payments']);
    expect(refused.written).toBe('capped');
    expect(await executionsWithKey(key)).toEqual([]);
    expect(await claim(key)).toEqual({ kind: 'in_flight' });

    // A cap that counts operations only asks nothing of intake; checked caps (omitted) write at once.
    const other = `k-${randomUUID()}`;
    const otherClaim = await claim(other);
    if (otherClaim.kind !== 'claimed') throw new Error('expected a claim');
    expect((await insert(other, otherClaim.token, ['http'])).written).toMatchObject({ createdAt: expect.any(Date) });
    const checked = await insert(key, mine.token);
    expect(checked.written).toMatchObject({ createdAt: expect.any(Date) });
    expect(await executionsWithKey(key)).toEqual([checked.id]);
    expect(await claim(key)).toEqual({ kind: 'replay', executionId: checked.id });
  });
});
