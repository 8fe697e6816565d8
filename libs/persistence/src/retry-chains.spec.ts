import { chargeOperation, insertTestExecution } from '../../../test/support/fixtures';
import { useTestDatabase } from '../../../test/support/test-database';
import { EARLIER_ATTEMPTS_SHOWN, INTAKE_SQL, RETRY_CHAIN_DEPTH, retryChainsOf } from './store';

/**
 * The earlier attempts of a retry (its chain of retries, `retry_of` followed back) with who denied each, and the denials
 * of the chain (the retry intake's denial limit), read by one statement: nearest first, the last EARLIER_ATTEMPTS_SHOWN
 * shown, at most RETRY_CHAIN_DEPTH links walked, and only the tenant's own operations.
 */
describe('retryChainsOf (real Postgres)', () => {
  const db = useTestDatabase('retrychains', ['acme', 'other']);

  /** A chain of `length` operations of `tenant`, each the retry of the one before; `denied` ones denied by key_r. */
  async function chain(tenant: string, length: number, denied: (i: number) => boolean): Promise<string[]> {
    const ids: string[] = [];
    for (let i = 0; i < length; i++) {
      const op = chargeOperation();
      await insertTestExecution(db.dataSource.manager, tenant, { operations: [op] });
      await db.dataSource.query(
        `UPDATE operations SET status = 'CANCELLED', terminal_reason = $3, retry_of = $2, approval = $4 WHERE id = $1`,
        [
          op.id,
          ids.at(-1) ?? null,
          denied(i) ? 'DENIED' : null,
          denied(i)
            ? { state: 'denied', decided_by: 'key_r', decided_at: '2026-12-07T10:00:00.000Z', reason: `no ${i}` }
            : null,
        ],
      );
      ids.push(op.id);
    }
    return ids;
  }

  const ops = (ids: string[]) =>
    db.dataSource.query(`SELECT id, retry_of AS "retryOf", approval FROM operations WHERE id = ANY($1)`, [
      ids,
    ]) as Promise<{ id: string; retryOf: string | null; approval: null }[]>;

  it('shows the nearest earlier attempts first, each denial with who, when and why, and counts every denial', async () => {
    const ids = await chain('acme', 13, (i) => i === 0 || i === 6 || i === 12);
    const last = ids[12];
    const found = (await retryChainsOf(db.dataSource.manager, 'acme', await ops([last]))).get(last)!;
    expect(found.denials).toBe(3);
    // The nearest EARLIER_ATTEMPTS_SHOWN, then the denied one further back.
    expect(found.earlier.map((a) => a.operationId)).toEqual([
      ...ids.slice(12 - EARLIER_ATTEMPTS_SHOWN, 12).reverse(),
      ids[0],
    ]);
    expect(found.earlier[5]).toEqual({
      operationId: ids[6],
      executionId: expect.stringMatching(/^exe_/),
      status: 'CANCELLED',
      terminalReason: 'DENIED',
      denial: { by: 'key_r', at: '2026-12-07T10:00:00.000Z', reason: 'no 6' },
    });
    expect(found.earlier[0].denial).toBeNull();
  });

  it('shows a denial further back than the nearest attempts: a reviewer is not kept from it by retries cancelled unsent', async () => {
    // Denied twice, then retried and cancelled unsent (no reviewer asked) until the denials lie past the nearest shown.
    const ids = await chain('acme', EARLIER_ATTEMPTS_SHOWN + 4, (i) => i < 2);
    const last = ids.at(-1)!;
    const found = (await retryChainsOf(db.dataSource.manager, 'acme', await ops([last]))).get(last)!;
    expect(found.denials).toBe(2);
    expect(found.earlier.map((a) => a.operationId)).toEqual([
      ...ids.slice(-1 - EARLIER_ATTEMPTS_SHOWN, -1).reverse(),
      ids[1],
      ids[0],
    ]);
    expect(found.earlier.slice(-2).map((a) => a.denial?.reason)).toEqual(['no 1', 'no 0']);
  });

  it('walks no more than RETRY_CHAIN_DEPTH links back', async () => {
    const ids = await chain('acme', RETRY_CHAIN_DEPTH + 2, (i) => i === 0);
    const last = ids.at(-1)!;
    // The first link (denied) is past the walk: not counted, and the chain says so (the denial limit refuses its retry).
    expect((await retryChainsOf(db.dataSource.manager, 'acme', await ops([last]))).get(last)).toMatchObject({
      denials: 0,
      uncounted: true,
    });
    const second = ids.at(-2)!;
    expect((await retryChainsOf(db.dataSource.manager, 'acme', await ops([second]))).get(second)).toMatchObject({
      denials: 1,
      uncounted: false,
    });
  });

  it('answers a page no more rows than it shows: the links past the shown ones are counted in the statement', async () => {
    // A page of operations with long chains: the walk goes RETRY_CHAIN_DEPTH links back for the count, but the rows
    // past the EARLIER_ATTEMPTS_SHOWN nearest (each with its approval and reason) are not sent to be thrown away.
    const ids = await chain('acme', RETRY_CHAIN_DEPTH + 2, (i) => i % 30 === 1);
    const last = ids.at(-1)!;
    const found = (await db.dataSource.query(INTAKE_SQL.retryChains, ['acme', [last], RETRY_CHAIN_DEPTH])) as {
      depth: number;
      denials: string;
    }[];
    // The nearest, and of the denied ones further back (depths 40, 70, 100) the nearest as many as DENIAL_LIMIT with
    // the denial at depth 10.
    expect(found.map((row) => row.depth)).toEqual([
      ...Array.from({ length: EARLIER_ATTEMPTS_SHOWN + 1 }, (_, d) => d),
      40,
      70,
    ]);
    expect(found.every((row) => Number(row.denials) === 4)).toBe(true);
    expect((await retryChainsOf(db.dataSource.manager, 'acme', await ops([last]))).get(last)!.denials).toBe(4);
  });

  it('reads only the tenant’s own operations, and nothing for an operation that is no retry and was not denied', async () => {
    const ids = await chain('other', 2, () => true);
    expect(await retryChainsOf(db.dataSource.manager, 'acme', await ops([ids[1]]))).toEqual(new Map());
    const [plain] = await chain('acme', 1, () => false);
    expect(await retryChainsOf(db.dataSource.manager, 'acme', await ops([plain]))).toEqual(new Map());
    // A link to another tenant's operation (no API makes one: a retry is of the tenant's own) is not followed either.
    const [across] = await chain('acme', 1, () => false);
    await db.dataSource.query(`UPDATE operations SET retry_of = $2 WHERE id = $1`, [across, ids[1]]);
    expect((await retryChainsOf(db.dataSource.manager, 'acme', await ops([across]))).get(across)).toEqual({
      earlier: [],
      denials: 0,
      uncounted: false,
    });
  });
});
