import { useTestDatabase } from '../../../test/support/test-database';
import { pruneExpired } from './maintenance';

describe('pruneExpired (real Postgres)', () => {
  const db = useTestDatabase('maintenance', ['acme']);

  const count = async (sql: string) => Number(((await db.dataSource.query(sql)) as { n: string }[])[0].n);

  it('deletes expired idempotency records and old sweep log rows, a batch at a time, and keeps the rest', async () => {
    for (let i = 0; i < 5; i += 1) {
      await db.dataSource.query(
        `INSERT INTO idempotency_keys (tenant_id, key, request_hash, state, expires_at)
         VALUES ('acme', $1, 'h', 'completed', now() - interval '1 hour'), ('acme', $2, 'h', 'completed', now() + interval '1 hour')`,
        [`old-${i}`, `live-${i}`],
      );
      await db.dataSource.query(
        `INSERT INTO sweep_log (worker, started_at) VALUES ('w', now() - interval '2 days'), ('w', now())`,
      );
    }
    expect(await pruneExpired(db.dataSource.manager, 3)).toEqual({ idempotency: 3, sweepLog: 3 });
    expect(await pruneExpired(db.dataSource.manager, 3)).toEqual({ idempotency: 2, sweepLog: 2 });
    expect(await pruneExpired(db.dataSource.manager, 3)).toEqual({ idempotency: 0, sweepLog: 0 });
    expect(await count(`SELECT count(*) AS n FROM idempotency_keys WHERE key LIKE 'live-%'`)).toBe(5);
    expect(await count(`SELECT count(*) AS n FROM idempotency_keys WHERE key LIKE 'old-%'`)).toBe(0);
    expect(await count(`SELECT count(*) AS n FROM sweep_log`)).toBe(5);
  });

  it('prunes a webhook create’s expired key, and not a live key of the same text on the other route', async () => {
    await db.dataSource.query(
      `INSERT INTO idempotency_keys (tenant_id, route, key, request_hash, state, expires_at)
       VALUES ('acme', 'executions', 'shared', 'h', 'completed', now() - interval '1 hour'),
              ('acme', 'webhooks', 'shared', 'h', 'completed', now() + interval '1 hour'),
              ('acme', 'webhooks', 'gone', 'h', 'completed', now() - interval '1 hour')`,
    );
    expect(await pruneExpired(db.dataSource.manager, 10)).toEqual({ idempotency: 2, sweepLog: 0 });
    expect(
      await db.dataSource.query(`SELECT route, key FROM idempotency_keys WHERE key IN ('shared', 'gone')`),
    ).toEqual([{ route: 'webhooks', key: 'shared' }]);
  });
});
