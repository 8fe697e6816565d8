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
import { sqlMigration } from './migrations/sql-migration';
import { dataSourceOptions } from './data-source';

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

/**
 * The sessions `pid` waits for that themselves wait for a lock: a concurrent index build stuck behind a session waiting
 * in a statement (which holds its snapshot all along).
 */
async function waitsOnAWaiter(db: DataSource, pid: number): Promise<number[]> {
  const rows = (await db.query(
    `SELECT pid FROM pg_stat_activity WHERE pid = ANY(pg_blocking_pids($1)) AND wait_event_type = 'Lock'`,
    [pid],
  )) as { pid: number }[];
  return rows.map((row) => row.pid);
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
      // Either the build completes, or it is seen waiting on the waiter's session (its virtual transaction) while that
      // session itself waits for a lock: the waiter in a statement that waits. A try between two pauses may hold the
      // build for the moment it runs; it never waits for anything.
      const blockedByWaiter = async () => (await waitsOnAWaiter(db.dataSource, builder.pid)).includes(pid);
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

/** A migration that builds its index CONCURRENTLY, outside a transaction, as the decision records an index may. */
class ConcurrentIndex1899999999998 extends sqlMigration(
  'ConcurrentIndex1899999999998',
  {
    up: [
      `DROP INDEX CONCURRENTLY IF EXISTS lock_scratch_concurrent`,
      `CREATE INDEX CONCURRENTLY lock_scratch_concurrent ON lock_scratch (id)`,
    ],
    down: [`DROP INDEX CONCURRENTLY IF EXISTS lock_scratch_concurrent`],
  },
  { transaction: false },
) {}

describe('a migration that builds an index CONCURRENTLY while another process waits for the migration lock', () => {
  const db = useTestDatabase('concurrentindex');

  it('completes, and the waiter then finds nothing to apply (it names the migration it does not know)', async () => {
    await db.dataSource.query(`CREATE TABLE lock_scratch (id int)`);
    // A writer's open transaction holds the build back (it waits for every writer of the table) until the second
    // process is waiting for the lock: the build's last phase then waits for every older snapshot, the waiter's too.
    const writer = await session(db.url);
    const newer = new DataSource({
      ...dataSourceOptions(db.url, 2),
      migrations: [...MIGRATIONS, ConcurrentIndex1899999999998],
    });
    await newer.initialize();
    const older = await migrator(db.url);
    const lines: string[] = [];
    let run: Watched<{ applied: string[]; unknown: string[] }> | undefined;
    let waiter: Watched<{ applied: string[]; unknown: string[] }> | undefined;
    try {
      await writer.client.query(`BEGIN`);
      await writer.client.query(`INSERT INTO lock_scratch VALUES (1)`);
      run = watched(runMigrationsLocked(newer));
      const buildPid = async () =>
        (
          (await db.dataSource.query(
            `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'CREATE INDEX CONCURRENTLY%'`,
          )) as { pid: number }[]
        )[0]?.pid;
      const heldByWriter = async () => {
        const pid = await buildPid();
        if (pid === undefined) return false;
        const [{ held }] = (await db.dataSource.query(`SELECT $2::int = ANY(pg_blocking_pids($1)) AS held`, [
          pid,
          writer.pid,
        ])) as { held: boolean }[];
        return held;
      };
      expect(await until(heldByWriter, run.settled, 20_000)).toBe(true);
      waiter = watched(runMigrationsLocked(older, { log: { info: (_fields, message) => lines.push(message) } }));
      // The waiter has asked for the lock: a session besides the run's (which holds it and is building the index).
      const asking = async () => {
        const [{ n }] = (await db.dataSource.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> $1 AND query ~ 'pg_(try_)?advisory_lock\\(\\$1\\)'`,
          [(await buildPid()) ?? 0],
        )) as { n: number }[];
        return n === 1;
      };
      expect(await until(asking, waiter.settled, 20_000)).toBe(true);
      await writer.client.query(`COMMIT`);

      const stuck = async () => {
        const pid = await buildPid();
        return pid !== undefined && (await waitsOnAWaiter(db.dataSource, pid)).length > 0;
      };
      expect({ stuck: await until(stuck, run.settled, 20_000), done: run.settled() }).toEqual({
        stuck: false,
        done: true,
      });
      // (Its `unknown` is judged against this code's MIGRATIONS, which do not hold the test's migration.)
      expect((await run.promise).applied).toEqual(['ConcurrentIndex1899999999998']);
      const [index] = (await db.dataSource.query(
        `SELECT indisvalid AS valid FROM pg_index WHERE indexrelid = 'lock_scratch_concurrent'::regclass`,
      )) as { valid: boolean }[];
      expect(index.valid).toBe(true);
      await expect(waiter.promise).resolves.toEqual({ applied: [], unknown: ['ConcurrentIndex1899999999998'] });
      expect(lines).toContain(MIGRATION_LOCK_WAITING);
    } finally {
      // On a failure: the build is cancelled, so that nothing is left waiting.
      if (run && !run.settled()) {
        await db.dataSource.query(
          `SELECT pg_cancel_backend(pid) FROM pg_stat_activity
            WHERE datname = current_database() AND query LIKE 'CREATE INDEX CONCURRENTLY%'`,
        );
      }
      await writer.client.end();
      await run?.promise.catch(() => undefined);
      await waiter?.promise.catch(() => undefined);
      await newer.destroy();
      await older.destroy();
    }
  }, 60_000);
});

/**
 * A migration that takes a while (two and a half seconds, longer than the idle timeout below), so a run can be watched
 * while it migrates.
 */
class SlowMigration1899999999996 extends sqlMigration('SlowMigration1899999999996', {
  up: [`SELECT pg_sleep(2.5)`],
  down: [],
}) {}

describe('the migration lock while its run migrates', () => {
  const db = useTestDatabase('locklost');

  it('is never free while a migration of the run is under way, also where Postgres ends idle sessions', async () => {
    // Postgres ends a session idle longer than idle_session_timeout (so do proxies and NATs with their own limits): a
    // lock session that sits idle while another session of the pool migrates lost the lock mid-run, and a second
    // process took it and migrated beside the first.
    const base = dataSourceOptions(db.url, 2);
    const ds = new DataSource({
      ...base,
      // 1 s: shorter than the slow migration (a session left idle through it is ended), longer than the pauses a
      // loaded machine puts between the run's own statements (300 ms ended the run's session between two of them).
      extra: { ...(base as { extra?: object }).extra, options: '-c idle_session_timeout=1000' },
      migrations: [...MIGRATIONS, SlowMigration1899999999996],
    });
    await ds.initialize();
    const other = await session(db.url);
    try {
      const run = watched(runMigrationsLocked(ds));
      const migrating = async () => {
        const [{ n }] = (await db.dataSource.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE datname = current_database() AND state = 'active' AND query LIKE 'SELECT pg_sleep(2.5)%'`,
        )) as { n: number }[];
        return n > 0;
      };
      expect(await until(migrating, run.settled, 20_000)).toBe(true);
      // Another process tries the lock until the run ends: it never gets it while the run migrates.
      let takenMidRun = false;
      while (!run.settled()) {
        const [{ locked }] = (await other.client.query(`SELECT pg_try_advisory_lock($1) AS locked`, [MIGRATION_LOCK]))
          .rows as { locked: boolean }[];
        if (locked) {
          takenMidRun = (await migrating()) || takenMidRun;
          await other.client.query(`SELECT pg_advisory_unlock($1)`, [MIGRATION_LOCK]);
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(takenMidRun).toBe(false);
      await expect(run.promise).resolves.toMatchObject({ applied: ['SlowMigration1899999999996'] });
    } finally {
      await other.client.end();
      await ds.destroy();
    }
  }, 60_000);
});

/** Two migrations after this code's: one that builds a table, one that fails midway (its table built, then 1/0). */
class ScratchTable1899999999990 extends sqlMigration('ScratchTable1899999999990', {
  up: [`CREATE TABLE failed_run_kept (id int)`],
  down: [`DROP TABLE failed_run_kept`],
}) {}
class FailsMidway1899999999991 extends sqlMigration('FailsMidway1899999999991', {
  up: [`CREATE TABLE failed_run_undone (id int)`, `SELECT 1 / 0`],
  down: [],
}) {}
class FailsMidwayOutside1899999999991 extends sqlMigration(
  'FailsMidwayOutside1899999999991',
  { up: [`CREATE TABLE failed_run_outside (id int)`, `SELECT 1 / 0`], down: [] },
  { transaction: false },
) {}

describe('a run whose migration fails', () => {
  const db = useTestDatabase('lockfailed');

  it.each([
    ['in its transaction', FailsMidway1899999999991, 'failed_run_undone', false],
    ['outside a transaction', FailsMidwayOutside1899999999991, 'failed_run_outside', true],
  ])(
    '%s: keeps what came before, undoes what it can, and frees the lock and its session',
    async (_, failing, table, kept) => {
      // One session in the pool: a run that kept it (released in a transaction, or not at all) leaves nothing to query on.
      const failingRun = new DataSource({
        ...dataSourceOptions(db.url, 1),
        migrations: [...MIGRATIONS, ScratchTable1899999999990, failing],
      });
      await failingRun.initialize();
      try {
        await expect(runMigrationsLocked(failingRun)).rejects.toThrow(/division by zero/);
        const [state] = (await failingRun.query(
          `SELECT pg_try_advisory_lock($1) AS locked, to_regclass('failed_run_kept') IS NOT NULL AS before,
                to_regclass($2) IS NOT NULL AS own`,
          [MIGRATION_LOCK, table],
        )) as { locked: boolean; before: boolean; own: boolean }[];
        await failingRun.query(`SELECT pg_advisory_unlock($1)`, [MIGRATION_LOCK]);
        expect(state).toEqual({ locked: true, before: true, own: kept });
        const recorded = (await failingRun.query(`SELECT name FROM migrations WHERE name LIKE '%18999999999%'`)) as {
          name: string;
        }[];
        expect(recorded.map((r) => r.name)).toEqual(['ScratchTable1899999999990']);
        // And another session finds the lock free as well: it was let go, not only re-entered by its holder.
        const other = await session(db.url);
        try {
          const [{ locked }] = (await other.client.query(`SELECT pg_try_advisory_lock($1) AS locked`, [MIGRATION_LOCK]))
            .rows as { locked: boolean }[];
          expect(locked).toBe(true);
        } finally {
          await other.client.end();
        }
      } finally {
        await failingRun.query(`DROP TABLE IF EXISTS failed_run_kept, failed_run_outside`).catch(() => undefined);
        await failingRun.query(`DELETE FROM migrations WHERE name LIKE '%18999999999%'`).catch(() => undefined);
        await failingRun.destroy();
      }
    },
    30_000,
  );
});
