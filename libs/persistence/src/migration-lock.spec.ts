import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { useTestDatabase } from '../../../test/support/test-database';
import {
  createDataSource,
  MIGRATION_LOCK_WAITING,
  MigrationLockTimeoutError,
  MigrationLog,
  runMigrationsLocked,
} from './data-source';
import { MIGRATIONS } from './migrations';

const MIGRATION_LOCK = 727_001;

/** A session of its own on `url`, and its backend pid. */
async function session(url: string): Promise<{ client: Client; pid: number }> {
  const client = new Client({ connectionString: url });
  await client.connect();
  const [{ pid }] = (await client.query('SELECT pg_backend_pid() AS pid')).rows as { pid: number }[];
  return { client, pid };
}

/** A DataSource of its own (two sessions: the lock's and the migrations'), as a process that migrates opens. */
async function migrator(url: string): Promise<DataSource> {
  return createDataSource(url, 2).initialize();
}

/** Polls `probe` every 50 ms until it answers true or `stop()` is true; false past `timeoutMs`. */
async function until(probe: () => Promise<boolean>, stop: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!stop() && Date.now() < deadline) {
    if (await probe()) return true;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return false;
}

/** A promise, and whether it has settled, readable at any time without awaiting it. */
interface Watched<T> {
  promise: Promise<T>;
  settled: () => boolean;
}

function watched<T>(promise: Promise<T>): Watched<T> {
  let settled = false;
  const tracked = promise.finally(() => {
    settled = true;
  });
  tracked.catch(() => undefined);
  return { promise: tracked, settled: () => settled };
}

/**
 * A process waiting for the migration lock must not hold a snapshot while it waits: CREATE INDEX CONCURRENTLY (a
 * migration's, run by the process that holds the lock) waits for every transaction with an older snapshot in the
 * database. With the wait made by `pg_advisory_lock` the build waited for the waiter and the waiter for the build's
 * run: both hung for good.
 */
describe('runMigrationsLocked while another process holds the migration lock (real Postgres)', () => {
  const db = useTestDatabase('migrationlock');

  it('a CREATE INDEX CONCURRENTLY completes while a second run waits for the lock; the waiter migrates once it is free', async () => {
    const last = MIGRATIONS[MIGRATIONS.length - 1];
    await db.dataSource.undoLastMigration({ transaction: 'each' });
    await db.dataSource.query(`CREATE TABLE lock_scratch (id int)`);
    await db.dataSource.query(`INSERT INTO lock_scratch SELECT generate_series(1, 1000)`);
    const holder = await session(db.url);
    const builder = await session(db.url);
    const ds = await migrator(db.url);
    let waiter: Watched<{ applied: string[]; unknown: string[] }> | undefined;
    let build: Watched<unknown> | undefined;
    try {
      const taken = await holder.client.query('SELECT pg_try_advisory_lock($1) AS ok', [MIGRATION_LOCK]);
      expect(taken.rows).toEqual([{ ok: true }]);
      waiter = watched(runMigrationsLocked(ds));
      // The waiter's session is there, asking for the lock (waiting in it, or between tries).
      const waiterPid = async (): Promise<number | undefined> => {
        const rows = (await db.dataSource.query(
          `SELECT pid FROM pg_stat_activity
            WHERE datname = current_database() AND pid NOT IN ($1, $2, pg_backend_pid())
              AND query ~ 'pg_(try_)?advisory_lock\\(\\$1\\)'`,
          [holder.pid, builder.pid],
        )) as { pid: number }[];
        return rows[0]?.pid;
      };
      const asking = async () => (await waiterPid()) !== undefined;
      expect(await until(asking, waiter.settled, 20_000)).toBe(true);
      const pid = (await waiterPid()) as number;

      build = watched(builder.client.query(`CREATE INDEX CONCURRENTLY lock_scratch_id ON lock_scratch (id)`));
      // Either the build completes, or it is seen waiting on the waiter's session (its virtual transaction).
      const blockedByWaiter = async () => {
        const rows = (await db.dataSource.query(`SELECT $2::int = ANY(pg_blocking_pids($1)) AS blocked`, [
          builder.pid,
          pid,
        ])) as { blocked: boolean }[];
        return rows[0].blocked;
      };
      const blocked = await until(blockedByWaiter, build.settled, 20_000);
      expect({ blockedByWaiter: blocked, built: build.settled() }).toEqual({ blockedByWaiter: false, built: true });
      await build.promise;
      const [index] = (await db.dataSource.query(
        `SELECT indisvalid AS valid FROM pg_index WHERE indexrelid = 'lock_scratch_id'::regclass`,
      )) as { valid: boolean }[];
      expect(index.valid).toBe(true);
      // The waiter still waits: the lock is still held.
      expect(waiter.settled()).toBe(false);

      await holder.client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]);
      await expect(waiter.promise).resolves.toEqual({ applied: [last.name], unknown: [] });
    } finally {
      // On a failure: the build is cancelled and the lock let go, so that nothing is left waiting.
      if (build && !build.settled()) await db.dataSource.query('SELECT pg_cancel_backend($1)', [builder.pid]);
      await build?.promise.catch(() => undefined);
      await holder.client.end();
      await waiter?.promise.catch(() => undefined);
      await builder.client.end();
      await ds.destroy();
    }
  }, 60_000);

  it('says it waits, naming the session that holds the lock, and gives up after timeoutMs with nothing migrated', async () => {
    const last = MIGRATIONS[MIGRATIONS.length - 1];
    await db.dataSource.undoLastMigration({ transaction: 'each' });
    const holder = await session(db.url);
    const ds = await migrator(db.url);
    const lines: { fields: object; message: string }[] = [];
    const log: MigrationLog = { info: (fields, message) => lines.push({ fields, message }) };
    try {
      await holder.client.query('SELECT pg_try_advisory_lock($1)', [MIGRATION_LOCK]);
      const started = Date.now();
      const error = (await runMigrationsLocked(ds, { log, timeoutMs: 700 }).catch((e: unknown) => e)) as Error;
      expect(error).toBeInstanceOf(MigrationLockTimeoutError);
      expect(error.message).toMatch(
        new RegExp(
          `^the migration lock was not free after \\d+ ms \\(MIGRATION_LOCK_TIMEOUT_MS\\): another process ` +
            `\\(Postgres session ${holder.pid}\\) is migrating this database; nothing was migrated$`,
        ),
      );
      expect(Date.now() - started).toBeGreaterThanOrEqual(700);
      expect(lines).toEqual([
        { fields: { holderPid: holder.pid, waitedMs: expect.any(Number) }, message: MIGRATION_LOCK_WAITING },
      ]);
      const ran = (await db.dataSource.query(`SELECT 1 FROM migrations WHERE name = $1`, [last.name])) as unknown[];
      expect(ran).toEqual([]);

      // Free again: the next run takes it at once, says nothing of a wait, and migrates.
      await holder.client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]);
      lines.length = 0;
      await expect(runMigrationsLocked(ds, { log, timeoutMs: 700 })).resolves.toEqual({
        applied: [last.name],
        unknown: [],
      });
      expect(lines).toEqual([]);
      // And lets it go: another session can take it.
      expect((await holder.client.query('SELECT pg_try_advisory_lock($1) AS ok', [MIGRATION_LOCK])).rows).toEqual([
        { ok: true },
      ]);
    } finally {
      await holder.client.end();
      await ds.destroy();
    }
  });

  it('two runs at once apply each pending migration exactly once', async () => {
    const pending = MIGRATIONS.slice(-3).map((m) => m.name);
    for (let i = 0; i < pending.length; i += 1) await db.dataSource.undoLastMigration({ transaction: 'each' });
    const [a, b] = await Promise.all([migrator(db.url), migrator(db.url)]);
    try {
      const runs = await Promise.all([runMigrationsLocked(a), runMigrationsLocked(b)]);
      expect(runs.map((run) => run.applied).sort((x, y) => y.length - x.length)).toEqual([pending, []]);
      const twice = (await db.dataSource.query(
        `SELECT name FROM migrations GROUP BY name HAVING count(*) > 1`,
      )) as unknown[];
      expect(twice).toEqual([]);
      const [{ n }] = (await db.dataSource.query(`SELECT count(*)::int AS n FROM migrations`)) as { n: number }[];
      expect(n).toBe(MIGRATIONS.length);
    } finally {
      await a.destroy();
      await b.destroy();
    }
  });
});
