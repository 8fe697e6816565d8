import { waitForLockWaiter } from '../../../test/support/lock-waits';
import { useTestDatabase } from '../../../test/support/test-database';
import { StopDeadline, STOP_CLOSE_MS } from '@verity/platform';
import { createDataSource, openDataSource } from './data-source';
import type { Pool } from 'pg';
import type { DataSource } from 'typeorm';
import { waitFor } from '../../../test/support/stack';
import {
  NOT_RUN_WHILE_STOPPING,
  isDatabaseUnavailable,
  readSnapshot,
  rows,
  sqlState,
  transaction,
  withinTransaction,
} from './sql';

/**
 * `rows()` prepares every statement (Postgres parses and plans it once per connection). It reaches the pg connection
 * through TypeORM internals (one of two places that do): were they to move, statements would silently run unprepared,
 * so these tests look in Postgres' own list of the session's prepared statements.
 */
describe('rows(): statements are really prepared', () => {
  const db = useTestDatabase('sqlprepared');

  const preparedIn = async (run: (sql: string) => Promise<unknown[]>, marker: string) =>
    (await run(`SELECT name, statement FROM pg_prepared_statements WHERE statement LIKE '%${marker}%'`)) as {
      name: string;
    }[];

  it('inside a transaction: on the transaction’s own connection', async () => {
    const marker = 'prepared_in_tx_7f3a';
    const found = await transaction(db.dataSource, async (tx) => {
      expect(await rows<{ v: number }>(tx, `SELECT 1 AS v /* ${marker} */`)).toEqual([{ v: 1 }]);
      return preparedIn((sql) => tx.query(sql), marker);
    });
    expect(found).toEqual([expect.objectContaining({ name: expect.stringMatching(/^v_[0-9a-f]{20}$/) })]);
  });

  it('outside a transaction: on the pool’s connection', async () => {
    // A pool of one, so the statement and the look at pg_prepared_statements share the connection.
    const single = createDataSource(db.url, 1);
    await single.initialize();
    try {
      const marker = 'prepared_on_pool_9c1d';
      expect(await rows<{ v: number }>(single.manager, `SELECT $1::int AS v /* ${marker} */`, [2])).toEqual([{ v: 2 }]);
      expect(await preparedIn((sql) => single.query(sql), marker)).toHaveLength(1);
    } finally {
      await single.destroy();
    }
  });
});

describe('rows(): a statement of its own chosen as a deadlock’s victim', () => {
  const db = useTestDatabase('sqldeadlock');

  it('is run again (it wrote nothing) and lands once the other side has gone on', async () => {
    await db.dataSource.query(`CREATE TABLE deadlock_pair (id int PRIMARY KEY, v int NOT NULL)`);
    // Row 2 first: the statement below scans (and locks) the rows in this order.
    await db.dataSource.query(`INSERT INTO deadlock_pair VALUES (2, 0), (1, 0)`);
    const other = db.dataSource.createQueryRunner();
    await other.connect();
    try {
      await other.startTransaction();
      // The other side never runs a deadlock check of its own before the statement does (a loaded machine can run the
      // statement's check late, and then the other side would find the cycle first and be the one aborted).
      await other.query(`SET LOCAL deadlock_timeout = '10min'`);
      await other.query(`UPDATE deadlock_pair SET v = 10 WHERE id = 1`);
      // Locks row 2, then waits for row 1: it waits first, so its own deadlock check finds the cycle and it is aborted.
      const statement = rows<{ id: number }>(
        db.dataSource.manager,
        `UPDATE deadlock_pair SET v = v + 1 RETURNING id /* deadlock_victim_5b2e */`,
      );
      // In this database only: the server is shared, and the same file run beside this one has a victim of its own.
      await waitForLockWaiter(db.dataSource, { statementLike: '%deadlock_victim_5b2e%' });
      await other.query(`UPDATE deadlock_pair SET v = v + 100 WHERE id = 2`);
      await other.commitTransaction();
      expect((await statement).map((row) => row.id).sort()).toEqual([1, 2]);
      // Once: the victim's first run wrote nothing.
      expect(await db.dataSource.query(`SELECT id, v FROM deadlock_pair ORDER BY id`)).toEqual([
        { id: 1, v: 11 },
        { id: 2, v: 101 },
      ]);
    } finally {
      await other.release();
    }
  });
});

/**
 * A Postgres that refuses another session (its connection slots, or the role's, are taken) is unavailable for now,
 * not broken: the API answers 503 with Retry-After. The refusal here is Postgres' own, for a role limited to none.
 */
describe('isDatabaseUnavailable', () => {
  const db = useTestDatabase('sqlunavailable');
  const role = `verity_no_slots_${process.pid}`;

  it('a session refused for too many connections (53300) is unavailable', async () => {
    await db.dataSource.query(`CREATE ROLE ${role} LOGIN CONNECTION LIMIT 0`);
    const url = new URL(db.url);
    url.username = role;
    const refused = createDataSource(url.toString(), 1);
    const error = await refused.initialize().then(
      () => null,
      (e: unknown) => e,
    );
    if (refused.isInitialized) await refused.destroy();
    await db.dataSource.query(`DROP ROLE ${role}`);
    expect(sqlState(error)).toBe('53300');
    expect(isDatabaseUnavailable(error)).toBe(true);
  });

  it('an error in the statement itself (division by zero) is not', async () => {
    const error = await db.dataSource.query(`SELECT 1/0`).then(
      () => null,
      (e: unknown) => e,
    );
    expect(sqlState(error)).toBe('22012');
    expect(isDatabaseUnavailable(error)).toBe(false);
  });

  it('a statement not sent because the process is stopping with no time left is unavailable (503), not an error', async () => {
    const deadline = new StopDeadline();
    const pool = await openDataSource(db.url, 1, 10_000, deadline);
    try {
      expect(await pool.query('SELECT 1 AS one')).toEqual([{ one: 1 }]);
      // A grace of exactly what the stop keeps for itself: no time is left for database work.
      deadline.begin(STOP_CLOSE_MS);
      const error = await pool.query('SELECT 1 AS one').then(
        () => null,
        (e: unknown) => e,
      );
      expect((error as Error).message).toContain(NOT_RUN_WHILE_STOPPING);
      expect(isDatabaseUnavailable(error)).toBe(true);
    } finally {
      await pool.destroy();
    }
  });
});

/** The pg pool under a DataSource: how many connections it holds (idle or lent). */
function pgPool(dataSource: DataSource): Pool {
  return (dataSource.driver as unknown as { master: Pool }).master;
}

/** readSnapshot: the reads of `work` see one moment, write nothing, and the connection goes back to the pool. */
describe('readSnapshot', () => {
  const db = useTestDatabase('sqlsnapshot');

  beforeAll(async () => {
    await db.dataSource.query(`CREATE TABLE snapshot_probe (v int)`);
    await db.dataSource.query(`INSERT INTO snapshot_probe VALUES (1)`);
  });

  it('reads what was committed before its first read, not what was committed between two of its reads', async () => {
    const seen = await readSnapshot(db.dataSource, async (tx) => {
      const first = await rows<{ v: number }>(tx, `SELECT v FROM snapshot_probe`);
      await db.dataSource.query(`UPDATE snapshot_probe SET v = 2`);
      const second = await rows<{ v: number }>(tx, `SELECT v FROM snapshot_probe`);
      return [first[0].v, second[0].v];
    });
    expect(seen).toEqual([1, 1]);
    expect(await db.dataSource.query(`SELECT v FROM snapshot_probe`)).toEqual([{ v: 2 }]);
  });

  it('refuses a write (read only), and a failed `work` ends its transaction and frees its connection', async () => {
    // A pool of one: the statement after a failed snapshot runs only if its connection came back, out of a transaction.
    const single = createDataSource(db.url, 1);
    await single.initialize();
    try {
      const write = readSnapshot(single, (tx) => rows(tx, `UPDATE snapshot_probe SET v = 3`));
      await expect(write).rejects.toThrow(/read-only transaction/);
      expect(
        await single.query(`SELECT v, current_setting('transaction_read_only') AS ro FROM snapshot_probe`),
      ).toEqual([{ v: 2, ro: 'off' }]);
    } finally {
      await single.destroy();
    }
  });

  it('is a transaction TypeORM knows of: withinTransaction given its manager runs in it, read only', async () => {
    // A pool of two: were the snapshot unknown to TypeORM, withinTransaction would open a read-write transaction on the
    // other connection.
    const pool = createDataSource(db.url, 2);
    await pool.initialize();
    try {
      const seen = await readSnapshot(pool, async (tx) => {
        const [outer] = await rows<{ pid: number }>(tx, `SELECT pg_backend_pid() AS pid`);
        const inner = await withinTransaction(tx, async (t) => {
          const [row] = await rows<{ pid: number; ro: string }>(
            t,
            `SELECT pg_backend_pid() AS pid, current_setting('transaction_read_only') AS ro`,
          );
          return row;
        });
        return { outer: outer.pid, inner };
      });
      expect(seen.inner).toEqual({ pid: seen.outer, ro: 'on' });
    } finally {
      await pool.destroy();
    }
  });

  it('whose end is refused (stopping, no grace left) answers its reads, and its connection is given back broken', async () => {
    const deadline = new StopDeadline();
    const pool = await openDataSource(db.url, 1, 10_000, deadline);
    try {
      const seen = await readSnapshot(pool, async (tx) => {
        const [row] = await rows<{ pid: number; v: number }>(
          tx,
          `SELECT pg_backend_pid() AS pid, v FROM snapshot_probe`,
        );
        // A grace of exactly what the stop keeps for itself: COMMIT is refused before it is sent.
        deadline.begin(STOP_CLOSE_MS);
        return row;
      });
      // Read only: nothing was left for COMMIT to keep, so the reads stand.
      expect(seen.v).toBe(2);
      // Not given back to the pool "idle in transaction": the pool let go of it at once, and its session is gone.
      expect(pgPool(pool).totalCount).toBe(0);
      await waitFor(
        async () =>
          (await db.dataSource.query(`SELECT 1 FROM pg_stat_activity WHERE pid = $1`, [seen.pid])) as unknown[],
        (found) => found.length === 0,
      );
    } finally {
      await pool.destroy();
    }
  });

  it('a failed `work` whose ROLLBACK is refused (stopping) fails with its own error, and its connection is broken', async () => {
    const deadline = new StopDeadline();
    const pool = await openDataSource(db.url, 1, 10_000, deadline);
    let pid = 0;
    try {
      const failed = readSnapshot(pool, async (tx) => {
        [{ pid }] = await rows<{ pid: number }>(tx, `SELECT pg_backend_pid() AS pid`);
        deadline.begin(STOP_CLOSE_MS);
        throw new Error('work failed');
      });
      await expect(failed).rejects.toThrow('work failed');
      expect(pgPool(pool).totalCount).toBe(0);
      await waitFor(
        async () => (await db.dataSource.query(`SELECT 1 FROM pg_stat_activity WHERE pid = $1`, [pid])) as unknown[],
        (found) => found.length === 0,
      );
    } finally {
      await pool.destroy();
    }
  });
});
