import { createHash } from 'node:crypto';
import type { Pool, PoolClient } from 'pg';
import { DataSource, EntityManager, QueryRunner } from 'typeorm';
import { announceCommitted, forgetUncommitted } from './event-signal';

/** Anything that can run SQL: the DataSource's manager or a transaction's manager. */
export type Queryable = Pick<EntityManager, 'query'>;

const statementNames = new Map<string, string>();

/** A stable name per SQL text: Postgres parses and plans a named statement once per connection, not on every call. */
function statementName(sql: string): string {
  let name = statementNames.get(sql);
  if (!name) {
    name = `v_${createHash('sha1').update(sql).digest('hex').slice(0, 20)}`;
    statementNames.set(sql, name);
  }
  return name;
}

/**
 * Where a statement can go as a prepared statement: the transaction's own connection, or the pool. Anything else
 * (an object that only has `query`) goes through TypeORM's unprepared path.
 *
 * One of the two places in Verity that reach into TypeORM internals (`queryRunner.databaseConnection`, `driver.master`;
 * the other is releaseBroken): TypeORM has no public way to hand a named (prepared) statement to pg. Were these to move in a TypeORM release,
 * statements would run unprepared (slower, still correct); sql.spec.ts looks in Postgres' `pg_prepared_statements`
 * and fails then.
 */
function preparedTarget(db: Queryable): Pick<Pool, 'query'> | Pick<PoolClient, 'query'> | null {
  const manager = db as Partial<EntityManager>;
  if (manager.queryRunner) {
    const connection = (manager.queryRunner as { databaseConnection?: PoolClient }).databaseConnection;
    return manager.queryRunner.isReleased || !connection ? null : connection;
  }
  const master = (manager.connection?.driver as { master?: Pool } | undefined)?.master;
  return master ?? null;
}

/**
 * Runs one statement and returns its rows. The hot paths (every transition, intake, the workers' reads) go through
 * here, so statements are prepared: on the busiest paths parsing and planning cost Postgres more than executing.
 */
export async function rows<T>(db: Queryable, sql: string, params: unknown[] = []): Promise<T[]> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await rowsOnce<T>(db, sql, params);
    } catch (error) {
      // A statement of its own (the DataSource's manager: no transaction around it) that Postgres chose as a deadlock's
      // victim wrote nothing, so running it again is running it for the first time; the other side has gone on. In a
      // transaction the whole transaction is aborted: `transaction` retries it.
      if (attempt >= 3 || sqlState(error) !== DEADLOCK || !ownStatement(db)) throw error;
    }
  }
}

const DEADLOCK = '40P01';

/** Whether a statement on `db` runs in a transaction of its own (autocommit on a pooled connection). */
function ownStatement(db: Queryable): boolean {
  const manager = db as Partial<EntityManager>;
  return manager.queryRunner === undefined && manager.connection !== undefined;
}

async function rowsOnce<T>(db: Queryable, sql: string, params: unknown[]): Promise<T[]> {
  const target = preparedTarget(db);
  if (target) {
    const result = await target.query({ name: statementName(sql), text: sql, values: params });
    return result.rows as T[];
  }
  // TypeORM returns `[rows, count]` for UPDATE/DELETE and `rows` otherwise; callers only want rows.
  const result: unknown = await db.query(sql, params);
  if (Array.isArray(result) && result.length === 2 && Array.isArray(result[0]) && typeof result[1] === 'number') {
    return result[0] as T[];
  }
  return result as T[];
}

/** The one row a statement returns (a lookup by key, an UPDATE … RETURNING of one row), or null when none matched. */
export async function firstRow<T>(db: Queryable, sql: string, params: unknown[] = []): Promise<T | null> {
  const [row] = await rows<T>(db, sql, params);
  return row ?? null;
}

/** The SQLSTATE of an error from pg (prepared path) or from TypeORM (its QueryFailedError wraps the driver's). */
export function sqlState(error: unknown): string | undefined {
  const e = error as { code?: unknown; driverError?: { code?: unknown } } | null;
  const code = e?.driverError?.code ?? e?.code;
  return typeof code === 'string' ? code : undefined;
}

const RETRYABLE_SQLSTATES = new Set(['40001', DEADLOCK]);

/**
 * A transaction that is retried on serialization failures and deadlocks, which Postgres resolves by aborting one side.
 * Every transaction that writes events goes through here: the events are announced once it commits.
 */
export async function transaction<T>(dataSource: DataSource, work: (tx: EntityManager) => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt += 1) {
    let runner: QueryRunner | undefined;
    try {
      const result = await dataSource.transaction((tx) => {
        runner = tx.queryRunner;
        return work(tx);
      });
      announceCommitted(runner);
      return result;
    } catch (error) {
      forgetUncommitted(runner);
      const code = sqlState(error);
      if (attempt >= 5 || !code || !RETRYABLE_SQLSTATES.has(code)) throw error;
      await new Promise((resolve) => setTimeout(resolve, 5 * attempt + Math.random() * 20));
    }
  }
}

/**
 * What makes a transaction readSnapshot's, after TypeORM's own START TRANSACTION: all its statements read one snapshot
 * (taken at its first read) and write nothing.
 */
export const READ_SNAPSHOT_SQL = {
  begin: 'SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY',
} as const;

/**
 * Runs `work`'s reads on one snapshot of the database (a read-only REPEATABLE READ transaction): an answer assembled
 * from several statements shows one moment. Under READ COMMITTED each statement has its own snapshot, so a change
 * committed between two of them (a cancel that ends an execution and its operations together) shows half done. Two
 * round trips to open it (TypeORM's START TRANSACTION, then its modes) and one to end it; `work` only reads (a write
 * is refused by Postgres).
 *
 * The transaction is opened through the query runner, so TypeORM knows of it: `withinTransaction` given its manager
 * runs in it (where a write is refused) rather than opening a second, read-write transaction on another connection.
 *
 * When the transaction cannot be ended (COMMIT or ROLLBACK refused while the process stops, or the connection lost),
 * its connection is given back broken: the pool discards it, and the server rolls back what it held, rather than
 * lending a session still "idle in transaction" to the next caller. Reads that all succeeded are answered even then:
 * the transaction wrote nothing, so there is nothing its COMMIT would keep.
 */
export async function readSnapshot<T>(dataSource: DataSource, work: (tx: EntityManager) => Promise<T>): Promise<T> {
  const runner = dataSource.createQueryRunner();
  let broken: unknown;
  try {
    await runner.startTransaction();
    await runner.query(READ_SNAPSHOT_SQL.begin);
    let result: T;
    try {
      result = await work(runner.manager);
    } catch (error) {
      await runner.rollbackTransaction().catch((failed: unknown) => (broken = failed));
      throw error;
    }
    await runner.commitTransaction().catch((failed: unknown) => (broken = failed));
    return result;
  } catch (error) {
    // Opening it failed: the connection may be left in a transaction (START sent, its modes not).
    if (runner.isTransactionActive && broken === undefined) {
      await runner.rollbackTransaction().catch((failed: unknown) => (broken = failed));
    }
    throw error;
  } finally {
    await (broken === undefined ? runner.release() : releaseBroken(runner, broken));
  }
}

/**
 * Gives a query runner's connection back to the pool as broken (pg-pool then ends it instead of lending it again).
 * TypeORM's public `release()` takes no error; its Postgres query runner releases with one on a connection's 'error'
 * (`releasePostgresConnection`, what pg-pool's `release(err)` is for). Were that to move in a TypeORM release, the
 * connection would be released as healthy; sql.spec.ts ('…is given back broken…') fails then.
 */
async function releaseBroken(runner: QueryRunner, error: unknown): Promise<void> {
  const release = (runner as unknown as { releasePostgresConnection?: (err: Error) => Promise<void> })
    .releasePostgresConnection;
  if (typeof release !== 'function') return runner.release();
  await release.call(runner, error instanceof Error ? error : new Error(String(error)));
}

/**
 * Runs `work` in a transaction: the caller's, when `db` is a transaction's manager, else a new one on the manager's
 * DataSource (retried on deadlock, as `transaction`). For a change that locks a row in one statement and writes it in
 * the next: a single statement that both locks a row (a subquery) and updates it (the outer scan) deadlocks under
 * three concurrent callers — the outer scan, on the statement's older snapshot, follows the row's update chain and
 * queues for a tuple lock a waiter holds while it waits for this transaction.
 */
export async function withinTransaction<T>(db: Queryable, work: (tx: Queryable) => Promise<T>): Promise<T> {
  const manager = db as Partial<EntityManager>;
  if (manager.queryRunner?.isTransactionActive) return work(db);
  if (manager.connection) return transaction(manager.connection, (tx) => work(tx));
  throw new Error('this change runs in a transaction: pass a DataSource manager or a transaction manager');
}

/**
 * A status list written into a statement, from libs/status-model's constants (enum strings, never user input), so
 * the statement and the model cannot disagree on which statuses count and the list is part of the statement's text.
 */
export function sqlLiterals(values: readonly string[]): string {
  return values.map((v) => `'${v.replace(/'/g, "''")}'`).join(', ');
}

/** The readiness probe: Postgres answers a trivial statement. */
export const PING_SQL = 'SELECT 1';

export async function ping(db: Queryable): Promise<void> {
  await db.query(PING_SQL);
}

export function isUniqueViolation(error: unknown): boolean {
  return sqlState(error) === '23505';
}

/** Why a statement was not sent: the process is stopping and its grace has no time left for one (see StopDeadline). */
export const NOT_RUN_WHILE_STOPPING =
  'statement not run: the process is stopping and its shutdown grace has no time left for database work';

/**
 * Postgres cannot take the statement now, through nobody's fault in the request: it is unreachable, shutting down or
 * starting, or out of a resource — class 53, `too_many_connections` (53300) above all: a pool growing under a burst
 * of requests is refused a session when the server's (or the role's) connection slots are taken — or this process is
 * stopping and sends no more statements (NOT_RUN_WHILE_STOPPING). Nothing was written; the caller is told to come
 * back (503, Retry-After), not that something broke (500).
 */
export function isDatabaseUnavailable(error: unknown): boolean {
  const e = error as { message?: string };
  const code = sqlState(error) ?? '';
  return (
    ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'ENOTFOUND', '57P01', '57P03', '08006', '08001', '08003'].includes(
      code,
    ) ||
    /^53[0-9A-Z]{3}$/.test(code) ||
    /Connection terminated|timeout exceeded when trying to connect|connect ECONNREFUSED|Query read timeout/i.test(
      e.message ?? '',
    ) ||
    (e.message ?? '').includes(NOT_RUN_WHILE_STOPPING)
  );
}

/** An instant as the API writes one (toISOString): UTC, milliseconds, `Z`. */
export function isoInstant(timestamp: string): string {
  return `to_char((${timestamp}) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
}
