import { Client } from 'pg';
import {
  MIGRATIONS,
  MIGRATION_LOCK,
  MIGRATION_LOCK_ABANDONED,
  MIGRATION_LOCK_WAITING,
  MIGRATION_SQL,
  MIGRATIONS_FINISHING,
} from '@verity/persistence';
import { lockWaiters } from '../support/lock-waits';
import { TestDatabase, createTestDatabase } from '../support/services';
import { signalWhileStarting } from '../support/start-signal';
import { waitFor } from '../support/stack';

/** The migration step's exit code when a signal stopped it before it took the migration lock (docs/operations.md). */
const ABANDONED_EXIT_CODE = 75;

/** The JSON log lines of `output` whose msg contains `text`. */
function linesWith(output: string, text: string): Record<string, unknown>[] {
  return output
    .split('\n')
    .filter((line) => line.startsWith('{') && line.includes(text))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

/**
 * The migration step (`npm run migrate`) signalled by its orchestrator — a deploy cancelled, a node drained. Until
 * 2026-12-06 it installed no handler: waiting for the migration lock another process held, it was ended by the signal
 * (no exit code, nothing logged), and a deploy could not tell "stopped before migrating" from a crash.
 */
describe('the migration step on SIGTERM/SIGINT', () => {
  const databases: TestDatabase[] = [];
  const sessions: Client[] = [];
  afterAll(async () => {
    for (const session of sessions) await session.end().catch(() => undefined);
    for (const db of databases) await db.drop();
  });

  async function session(url: string): Promise<{ client: Client; pid: number }> {
    const client = new Client({ connectionString: url });
    sessions.push(client);
    await client.connect();
    const [{ pid }] = (await client.query('SELECT pg_backend_pid() AS pid')).rows as { pid: number }[];
    return { client, pid };
  }

  it.each(['SIGTERM', 'SIGINT'] as const)(
    '%s while it waits for the lock another session holds: it stops waiting, says why, closes its sessions, exits 75, nothing migrated',
    async (signal) => {
      const db = await createTestDatabase('migratesig', { migrated: false });
      databases.push(db);
      // Its only sessions are then the holder's and the step's.
      await db.dataSource.destroy();
      const holder = await session(db.url);
      expect((await holder.client.query(MIGRATION_SQL.tryLock, [MIGRATION_LOCK])).rows).toEqual([{ locked: true }]);

      const stopped = await signalWhileStarting('migrate', { DATABASE_URL: db.url }, signal, (written) =>
        waitFor(
          async () => written(),
          (text) => text.includes(MIGRATION_LOCK_WAITING),
          30_000,
          50,
        ),
      );

      expect(stopped.exit).toEqual({ code: ABANDONED_EXIT_CODE, signal: null });
      const [abandoned] = linesWith(stopped.output, MIGRATION_LOCK_ABANDONED);
      expect(abandoned).toMatchObject({ level: 40, signal, holderPid: holder.pid, exitCode: ABANDONED_EXIT_CODE });
      expect(abandoned.msg).toContain('nothing was migrated');
      // Nothing migrated: not even TypeORM's migrations table, and no table of ours.
      const tables = await holder.client.query(`SELECT tablename FROM pg_tables WHERE schemaname = 'public'`);
      expect(tables.rows).toEqual([]);
      // Its sessions are gone, and the lock is still the holder's alone.
      await waitFor(
        async () =>
          (
            await holder.client.query(
              `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> $1`,
              [holder.pid],
            )
          ).rows[0] as { n: number },
        ({ n }) => n === 0,
        10_000,
        50,
      );
      expect((await holder.client.query(MIGRATION_SQL.holder, [MIGRATION_LOCK])).rows).toEqual([{ pid: holder.pid }]);
    },
    60_000,
  );

  it('SIGTERM while it migrates (the lock taken): the migration under way commits, the step ends its run and exits 0', async () => {
    const db = await createTestDatabase('migratesigrun');
    databases.push(db);
    const last = MIGRATIONS[MIGRATIONS.length - 1].name;
    await db.dataSource.undoLastMigration({ transaction: 'each' });
    // The migration's record (an INSERT into TypeORM's table, in the migration's transaction) waits for this session:
    // the step is signalled in the middle of a migration, its lock held and its transaction open.
    const blocker = await session(db.url);
    await blocker.client.query('BEGIN');
    await blocker.client.query('LOCK TABLE migrations IN SHARE MODE');
    let released: Promise<void> = Promise.resolve();

    const stopped = await signalWhileStarting('migrate', { DATABASE_URL: db.url }, 'SIGTERM', async (written) => {
      await waitFor(
        () => lockWaiters(db.dataSource, '%INSERT INTO%migrations%'),
        (n) => n === 1,
        30_000,
        50,
      );
      // Once it has said it finishes first, the migration is let through.
      released = waitFor(
        async () => written(),
        (text) => text.includes(MIGRATIONS_FINISHING),
        30_000,
        50,
      ).then(
        async () => void (await blocker.client.query('COMMIT')),
        async (error: unknown) => {
          await blocker.client.query('ROLLBACK');
          throw error;
        },
      );
    });
    await released;

    expect(stopped.exit).toEqual({ code: 0, signal: null });
    expect(linesWith(stopped.output, MIGRATIONS_FINISHING)).toEqual([
      expect.objectContaining({ level: 30, signal: 'SIGTERM' }),
    ]);
    expect(linesWith(stopped.output, 'migrations applied')).toEqual([expect.objectContaining({ applied: [last] })]);
    const recorded = (await db.dataSource.query(MIGRATION_SQL.applied, [last])) as unknown[];
    expect(recorded).toHaveLength(1);
  }, 60_000);
});
