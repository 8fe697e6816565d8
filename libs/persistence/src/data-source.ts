import { setTimeout as sleep } from 'node:timers/promises';
import { Client, ClientConfig } from 'pg';
import { DataSource, DataSourceOptions, MigrationExecutor, QueryRunner } from 'typeorm';
import type { StopDeadline } from '@verity/platform';
// Not from the index: this module (with the entities and migrations) is all a test stack needs of libs/persistence,
// and the platform's index is Nest and zod, ~0.3 s of CPU for each test file that loads it.
import { redactUrl } from '@verity/platform/redis';
import { ENTITIES } from './entities';
import { MIGRATIONS } from './migrations';
import { NOT_RUN_WHILE_STOPPING, Queryable, sqlState } from './sql';

/** pg's client settings, and the process's stop deadline, which reaches each client through the pool's settings. */
type PgClientConfig = ClientConfig & { stopDeadline?: StopDeadline };

/**
 * A pg client that can never crash the process with an unheard 'error' event. pg emits 'error' on a client whose
 * server goes away (a Postgres crash or restart sends FATAL to idle sessions) and Node throws an 'error' event nobody
 * listens to. The pool listens while a client is idle and TypeORM while a query runner holds it, but a client between
 * those hands (released with an error, being ended) has no listener, and a dispatcher died of exactly that in a chaos
 * run. The error is not lost: queries in flight are rejected with it, and the pool drops the broken client.
 */
export class ResilientPgClient extends Client {
  constructor(config?: string | PgClientConfig) {
    super(config);
    const queryTimeout = typeof config === 'object' ? config.query_timeout : undefined;
    const stop = typeof config === 'object' ? config.stopDeadline : undefined;
    this.on('error', () => undefined);
    // pg's query_timeout rejects the caller but leaves the statement on the wire: the session stays busy, goes back
    // to the pool and every later statement queues behind the one that never answers (and a transaction opened on it
    // stays open). A timed-out session is dropped instead: the pool replaces it, the server rolls its work back.
    const send = this.query.bind(this) as (...args: unknown[]) => unknown;
    const drop = (error: unknown) => {
      if (isQueryTimeout(error)) this.connection.stream.destroy();
    };
    this.query = ((...args: unknown[]) => {
      const last = args.length - 1;
      const callback = args[last];
      // Once the process is stopping, a statement gets at most what is left of the stop's grace, and none is sent once
      // nothing is: each one waited up to the whole query timeout, and two in a row outlasted the grace.
      const left = stop?.leftMs() ?? null;
      if (left !== null) {
        if (left === 0) return refuseWhileStopping(callback);
        const bounded = withTimeout(args[0], Math.min(left, queryTimeout ?? left));
        if (bounded) args[0] = bounded;
      }
      if (typeof callback === 'function') {
        args[last] = (error: unknown, ...rest: unknown[]) => {
          drop(error);
          return (callback as (...a: unknown[]) => unknown)(error, ...rest);
        };
      }
      const result = send(...args);
      if (result instanceof Promise) result.catch(drop);
      return result;
    }) as Client['query'];
    // Ending a session waits for the server to close its side, which a server that stopped answering never does:
    // pool.end() on shutdown then outlasted the forced exit. The end asks for no answer (Terminate is written at once),
    // so past a short wait the socket is simply dropped: the server sees the session go either way, and rolls back
    // whatever it held. Waiting the whole query timeout here made a stop during a stall last the statement in flight
    // plus as long again, past the grace from a query timeout of half of it.
    const limit = queryTimeout;
    if (limit) {
      const close = this.end.bind(this) as (...args: unknown[]) => unknown;
      this.end = ((...args: unknown[]) => {
        setTimeout(() => this.connection.stream.destroy(), Math.min(limit, SESSION_END_MS)).unref();
        return close(...args);
      }) as Client['end'];
    }
  }
}

/** A statement refused before it was sent (nothing of it reached the server), in the form pg's caller expects. */
function refuseWhileStopping(callback: unknown): unknown {
  const error = new Error(NOT_RUN_WHILE_STOPPING);
  if (typeof callback === 'function') {
    process.nextTick(() => (callback as (e: Error) => void)(error));
    return undefined;
  }
  return Promise.reject(error);
}

/**
 * A statement's text or config with its own query_timeout of `ms` (pg reads one from the config before its client's);
 * undefined for a query object of its own (a stream, a cursor), left as it is.
 */
function withTimeout(query: unknown, ms: number): object | undefined {
  if (typeof query === 'string') return { text: query, query_timeout: ms };
  if (query && typeof query === 'object' && typeof (query as { submit?: unknown }).submit !== 'function') {
    return { ...query, query_timeout: ms };
  }
  return undefined;
}

/**
 * How long ending a session waits for the server to close its side before the socket is dropped: a healthy server
 * closes within a round trip; one that stopped answering never does.
 */
export const SESSION_END_MS = 1_000;

/**
 * pg's own error when a statement got no reply within query_timeout (also wrapped in TypeORM's QueryFailedError). The
 * statement was sent: the server may still carry it out (a single statement commits by itself), so what it wrote is
 * unknown, not absent.
 */
export function isQueryTimeout(error: unknown): boolean {
  const e = error as { message?: unknown; driverError?: { message?: unknown } } | null;
  return e?.message === 'Query read timeout' || e?.driverError?.message === 'Query read timeout';
}

/** `stopDeadline`: the process's (see StopDeadline); each pg client of the pool bounds its statements by it. */
export function dataSourceOptions(
  url: string,
  poolSize = 10,
  queryTimeoutMs?: number,
  stopDeadline?: StopDeadline,
): DataSourceOptions {
  return {
    type: 'postgres',
    url,
    entities: ENTITIES,
    migrations: MIGRATIONS,
    // Never synchronize: the schema changes only through reviewed migrations.
    synchronize: false,
    migrationsRun: false,
    logging: false,
    extra: {
      max: poolSize,
      connectionTimeoutMillis: 5000,
      Client: ResilientPgClient,
      ...(queryTimeoutMs ? { query_timeout: queryTimeoutMs } : {}),
      ...(stopDeadline ? { stopDeadline } : {}),
    },
  };
}

/**
 * Opens a DataSource (its pool), and so is where an app started without a Postgres it can use stops: with one line
 * naming Postgres, where it was sought (password masked) and why. The pool's first session is the check; no session
 * of its own is opened and ended for it (one more connection per start, whose end had no bound against a server that
 * accepted the session and then stopped answering). Left to the TypeORM module, Nest printed its own report instead (a
 * colored retry line and the pg error's stack, twice). The app exits 1, and whatever supervises it starts it again.
 */
export async function openDataSource(
  url: string,
  poolSize = 10,
  queryTimeoutMs?: number,
  stopDeadline?: StopDeadline,
): Promise<DataSource> {
  const dataSource = new DataSource(dataSourceOptions(url, poolSize, queryTimeoutMs, stopDeadline));
  try {
    return await dataSource.initialize();
  } catch (error) {
    const why = error instanceof Error ? error.message : String(error);
    throw new Error(
      `Postgres at ${redactUrl(url)} cannot be used (${why}): the app needs it to start; start Postgres or correct ` +
        'DATABASE_URL',
    );
  }
}

/**
 * Opens the app's DataSource before Nest builds the app (the first thing it asks Postgres, after Redis' policy check),
 * with the pool size and query timeout of its config and the process's stop deadline; the app's module is given it
 * (PersistenceModule.forRoot) rather than opening a second pool.
 */
export function openAppDataSource(
  config: { DATABASE_URL: string; DATABASE_POOL_SIZE: number; DATABASE_QUERY_TIMEOUT_MS: number },
  stopDeadline: StopDeadline,
): Promise<DataSource> {
  return openDataSource(config.DATABASE_URL, config.DATABASE_POOL_SIZE, config.DATABASE_QUERY_TIMEOUT_MS, stopDeadline);
}

/**
 * A DataSource not yet opened. `statementTimeoutMs`, given: each statement of its sessions is cancelled by Postgres
 * after that long, and a wait for a lock after that long (`statement_timeout`, `lock_timeout`): its transaction is rolled
 * back and the error says so (isStatementTimeout). For a command-line tool, which would otherwise wait on a row another
 * session holds for as long as that session holds it.
 */
export function createDataSource(url: string, poolSize = 10, statementTimeoutMs?: number): DataSource {
  const options = dataSourceOptions(url, poolSize);
  if (statementTimeoutMs === undefined) return new DataSource(options);
  return new DataSource({
    ...options,
    extra: { ...options.extra, statement_timeout: statementTimeoutMs, lock_timeout: statementTimeoutMs },
  } as DataSourceOptions);
}

/** Whether Postgres cancelled a statement for its `statement_timeout` or `lock_timeout` (createDataSource). */
export function isStatementTimeout(error: unknown): boolean {
  const e = error as { code?: unknown; driverError?: { code?: unknown } } | null;
  const code = e?.driverError?.code ?? e?.code;
  return code === '57014' || code === '55P03';
}

/** The key of the migration lock: a session-level advisory lock, scoped to its database. */
export const MIGRATION_LOCK = 727_001;

export const MIGRATION_SQL = {
  /** Never waits: a statement that waits for a lock holds a snapshot while it does (see runMigrationsLocked). */
  tryLock: 'SELECT pg_try_advisory_lock($1) AS locked',
  unlock: 'SELECT pg_advisory_unlock($1)',
  /** The session holding the migration lock in this database (a bigint key is classid 0, objid, objsubid 1). */
  holder: `SELECT pid FROM pg_locks
    WHERE locktype = 'advisory' AND granted AND classid = 0 AND objid = $1 AND objsubid = 1
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
  /** Whether a migration is recorded as run (TypeORM's own table). */
  applied: 'SELECT 1 AS applied FROM migrations WHERE name = $1',
  /** The migrations recorded as run that are not among $1 (this code's): a newer release ran them. */
  unknown: 'SELECT name FROM migrations WHERE name <> ALL($1::text[]) ORDER BY timestamp, name',
} as const;

/** The name TypeORM records for the last migration of this code: its schema is there once that one has run. */
export function lastMigrationName(): string {
  return migrationNames()[MIGRATIONS.length - 1];
}

/**
 * Resolves when the schema this code needs is there (its last migration is recorded as run); rejects naming that
 * migration otherwise, also when none ever ran (no migrations table). A worker's readiness asks it: a process started
 * before the migrations ran said ready, and every job it took failed on a missing table or column.
 */
export async function assertSchemaMigrated(db: Queryable): Promise<void> {
  const name = lastMigrationName();
  const rows = (await db.query(MIGRATION_SQL.applied, [name]).catch((error: unknown) => {
    if (sqlState(error) === UNDEFINED_TABLE) return [];
    throw error;
  })) as unknown[];
  if (rows.length === 0) throw new SchemaNotMigratedError(name);
}

/** The schema this code needs is not there: its last migration (`migration`) has not run. */
export class SchemaNotMigratedError extends Error {
  constructor(readonly migration: string) {
    super(`the database schema is not migrated: migration ${migration} has not run`);
    this.name = 'SchemaNotMigratedError';
  }
}

const UNDEFINED_TABLE = '42P01';

/**
 * A readiness probe of the schema (assertSchemaMigrated) that, once it has seen the schema migrated, is not asked
 * again: a schema is not un-migrated, and every readiness check would otherwise cost a second statement.
 */
export function schemaMigratedProbe(db: Queryable): () => Promise<void> {
  let migrated = false;
  return async () => {
    if (migrated) return;
    await assertSchemaMigrated(db);
    migrated = true;
  };
}

/** What the migration step logs (warn) when the database holds migrations its code does not know. */
export const NEWER_SCHEMA =
  'the database has migrations this release does not know (a newer release ran them, listed in unknown): nothing ' +
  'was undone; this release runs on that schema only if those migrations kept what it uses';

/** The name TypeORM records for each migration of this code. */
function migrationNames(): string[] {
  return MIGRATIONS.map((Migration) => (new Migration() as { name?: string }).name ?? Migration.name);
}

/** What the migration step logs (info) when the lock is taken by another process, and again each minute it waits. */
export const MIGRATION_LOCK_WAITING =
  'waiting for the migration lock: another process is migrating this database (holderPid: its Postgres session)';

/**
 * What the migration step logs (warn) when a signal (SIGTERM, SIGINT) stopped it while it waited for the migration
 * lock: it stops waiting, migrates nothing, and exits with a code of its own (docs/operations.md).
 */
export const MIGRATION_LOCK_ABANDONED = 'stopped waiting for the migration lock';

/**
 * What runMigrationsLocked logs (info) when it is asked to stop (its `signal`) after it took the lock: the migrations
 * pending run to their end first, each in its own transaction (docs/decisions.md).
 */
export const MIGRATIONS_FINISHING =
  'asked to stop while migrating: the pending migrations run to their end first, then the process exits';

/** The pause between two tries for the migration lock: it starts at `firstMs` and doubles up to `maxMs`. */
export const MIGRATION_LOCK_POLL = { firstMs: 100, maxMs: 2_000 } as const;

/** How often the wait for the migration lock is logged again while it lasts. */
const WAIT_LOG_EVERY_MS = 60_000;

/** Where runMigrationsLocked says it waits (pino's logger is one). */
export interface MigrationLog {
  info(fields: object, message: string): void;
}

export interface MigrationLockOptions {
  log?: MigrationLog;
  /** How long to wait for the lock before giving up (MigrationLockTimeoutError); 0 or unset: as long as it takes. */
  timeoutMs?: number;
  /**
   * Asks the run to stop (the process was signalled; its reason names the signal). Before the lock is taken the wait
   * ends (MigrationLockAbandonedError): nothing was migrated. Once it is taken the pending migrations run to their end
   * (logged, MIGRATIONS_FINISHING): each is its own transaction, and TypeORM's executor has no stop between two of
   * them (docs/decisions.md).
   */
  signal?: AbortSignal;
}

/** The migration lock was not free within the time allowed: nothing was migrated. */
export class MigrationLockTimeoutError extends Error {
  constructor(
    readonly waitedMs: number,
    readonly holderPid: number | null,
  ) {
    super(
      `the migration lock was not free after ${waitedMs} ms (MIGRATION_LOCK_TIMEOUT_MS): another process ` +
        `${holderPid === null ? '' : `(Postgres session ${holderPid}) `}is migrating this database; nothing was ` +
        'migrated',
    );
    this.name = 'MigrationLockTimeoutError';
  }
}

/** A stop was asked (MigrationLockOptions.signal) while the migration lock was waited for: nothing was migrated. */
export class MigrationLockAbandonedError extends Error {
  constructor(
    readonly reason: string,
    readonly waitedMs: number,
    readonly holderPid: number | null,
  ) {
    super(
      `${MIGRATION_LOCK_ABANDONED} after ${waitedMs} ms (${reason}): nothing was migrated` +
        (holderPid === null ? '' : `; the lock is held by Postgres session ${holderPid} (another process migrating)`),
    );
    this.name = 'MigrationLockAbandonedError';
  }
}

/**
 * Two replicas starting at once must not both migrate: the first takes the advisory lock, the other waits. Returns the
 * migrations it applied, and those recorded as run that this code does not know (`unknown`): a newer release migrated
 * the database (a rollback, an older replica started during an upgrade). Nothing is undone for them — an older
 * replica beside a newer one is how an upgrade rolls — but "up to date" would not be true, so the caller says so.
 *
 * The lock is waited for by trying it (`pg_try_advisory_lock`) with a pause between tries, never by a statement that
 * waits: such a statement holds a snapshot for as long as it waits, and `CREATE INDEX CONCURRENTLY` (a migration of the
 * lock's holder) waits for every older snapshot in the database, so the build and the waiter waited for each other for
 * good. Between tries the session is idle, in no transaction. The lock stays on that one session for the whole run,
 * and the migrations run on that same session: a session that only held the lock sat idle while another migrated, so
 * Postgres (`idle_session_timeout`) or a proxy between could end it mid-run — the lock let go, and a second process
 * migrating beside the first — and nothing noticed until the run's end. Ended now, it ends the run's own statement.
 */
export async function runMigrationsLocked(
  dataSource: DataSource,
  options: MigrationLockOptions = {},
): Promise<{ applied: string[]; unknown: string[] }> {
  const runner = dataSource.createQueryRunner();
  await runner.connect();
  let locked = false;
  const { signal, log } = options;
  const finishing = () => log?.info({ signal: String(signal?.reason) }, MIGRATIONS_FINISHING);
  try {
    await waitForMigrationLock(runner, options);
    locked = true;
    if (signal?.aborted) finishing();
    else signal?.addEventListener('abort', finishing, { once: true });
    const executor = new MigrationExecutor(dataSource, runner);
    executor.transaction = 'each';
    const applied = await executor.executePendingMigrations();
    const unknown = (await runner.query(MIGRATION_SQL.unknown, [migrationNames()])) as { name: string }[];
    return { applied: applied.map((m) => m.name), unknown: unknown.map((m) => m.name) };
  } finally {
    signal?.removeEventListener('abort', finishing);
    if (locked) await runner.query(MIGRATION_SQL.unlock, [MIGRATION_LOCK]).catch(() => undefined);
    await runner.release();
  }
}

/** Takes the migration lock on `runner`'s session, trying again with a growing pause while another session holds it. */
async function waitForMigrationLock(
  runner: QueryRunner,
  { log, timeoutMs = 0, signal }: MigrationLockOptions,
): Promise<void> {
  const tryLock = async () =>
    ((await runner.query(MIGRATION_SQL.tryLock, [MIGRATION_LOCK])) as { locked: boolean }[])[0].locked;
  const holder = async () =>
    ((await runner.query(MIGRATION_SQL.holder, [MIGRATION_LOCK])) as { pid: number }[])[0]?.pid ?? null;
  const started = Date.now();
  const abandoned = async () =>
    new MigrationLockAbandonedError(String(signal?.reason), Date.now() - started, await holder());
  if (signal?.aborted) throw await abandoned();
  if (await tryLock()) return;
  let pause: number = MIGRATION_LOCK_POLL.firstMs;
  let loggedAt = -Infinity;
  for (;;) {
    const waitedMs = Date.now() - started;
    if (waitedMs - loggedAt >= WAIT_LOG_EVERY_MS) {
      log?.info({ holderPid: await holder(), waitedMs }, MIGRATION_LOCK_WAITING);
      loggedAt = waitedMs;
    }
    const left = timeoutMs > 0 ? timeoutMs - waitedMs : Infinity;
    if (left <= 0) throw new MigrationLockTimeoutError(waitedMs, await holder());
    // Ends early when the stop is asked (its rejection is that abort, checked next).
    await sleep(Math.min(pause, left), undefined, { signal }).catch(() => undefined);
    if (signal?.aborted) throw await abandoned();
    pause = Math.min(pause * 2, MIGRATION_LOCK_POLL.maxMs);
    if (await tryLock()) {
      log?.info({ waitedMs: Date.now() - started }, 'migration lock taken');
      return;
    }
  }
}
