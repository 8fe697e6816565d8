import type { DataSource, EntityManager, QueryRunner } from 'typeorm';
import { withSessions } from './sessions';
import { waitFor } from './stack';

/**
 * How many other sessions of this database wait on a lock — only those running a statement LIKE `statementLike` when
 * given, and only those the session of backend `blockedBy` holds up when given (`pg_blocking_pids`). A test proves an
 * order ("the revocation waits for the decision's lock") on this, never on a sleep.
 */
export async function lockWaiters(db: DataSource, statementLike?: string, blockedBy?: number): Promise<number> {
  const [{ n }] = (await db.query(
    `SELECT count(*)::int AS n FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()
        AND ($1::text IS NULL OR query LIKE $1) AND ($2::int IS NULL OR $2::int = ANY(pg_blocking_pids(pid)))`,
    [statementLike ?? null, blockedBy ?? null],
  )) as { n: number }[];
  return n;
}

/**
 * Waits until another session waits on a lock (see lockWaiters), or until `unless()` says there is nothing to wait
 * for (the statement finished without waiting).
 */
export async function waitForLockWaiter(
  db: DataSource,
  options: { statementLike?: string; blockedBy?: number; unless?: () => boolean } = {},
): Promise<void> {
  await waitFor(
    async () => (options.unless?.() ?? false) || (await lockWaiters(db, options.statementLike, options.blockedBy)) > 0,
    (done) => done,
  );
}

/**
 * Makes `write` while a revocation of `keyId` is written and not yet committed: waits until `write` waits on that
 * revocation's row lock (or has answered without waiting), commits the revocation, and returns what `write` answered.
 * A statement that checks the key without locking it answers first, from before the revocation. A `write` that
 * rejects rejects this with its error. The wait is recognised by a statement on api_keys; `{ waitingStatementLike:
 * null }` takes any lock wait, for a statement whose text pg_stat_activity cuts before it names the table (it keeps
 * the first track_activity_query_size bytes).
 */
export async function writeDuringRevocation<T>(
  db: DataSource,
  keyId: string,
  write: () => Promise<T>,
  { waitingStatementLike = '%api_keys%' }: { waitingStatementLike?: string | null } = {},
): Promise<T> {
  const revocation = db.createQueryRunner();
  await revocation.connect();
  try {
    await revocation.startTransaction();
    await revocation.query(`UPDATE api_keys SET revoked_at = now() WHERE id = $1`, [keyId]);
    let answered = false;
    const writing = write().finally(() => (answered = true));
    // Its rejection is the caller's (returned below); until then it is not an unhandled one.
    writing.catch(() => undefined);
    await waitForLockWaiter(db, { statementLike: waitingStatementLike ?? undefined, unless: () => answered });
    await revocation.commitTransaction();
    return await writing;
  } finally {
    if (revocation.isTransactionActive) await revocation.rollbackTransaction();
    await revocation.release();
  }
}

/**
 * Makes `write` while another session holds the operation's row (as a reviewer's decision or a sweep does): `write`
 * starts (and judges what it reads), then waits for the row. Meanwhile `change` is made and committed in a transaction
 * of its own, answered at once or waiting for `write` (two sessions then wait on locks). Then the holder lets go.
 * Answers what `write` answered and the operation's status as `change`'s transaction saw it just before its commit (a
 * fresh snapshot per statement): whether `write` had committed when the change was made — `write`'s promise settles
 * later than its commit, and on a loaded machine the change's commit can be answered first.
 */
export async function writeWhileRowHeld<T>(
  db: DataSource,
  operationId: string,
  write: () => Promise<T>,
  change: (tx: EntityManager) => Promise<unknown>,
): Promise<{ written: T; statusSeenByChange: string }> {
  return withSessions(db, ['holder', 'other'], async ({ holder, other }) => {
    await holder.startTransaction();
    await holder.query(`SELECT 1 FROM operations WHERE id = $1 FOR UPDATE`, [operationId]);
    let answered = false;
    const writing = write().finally(() => (answered = true));
    await waitForLockWaiter(db, { unless: () => answered });
    let statusSeenByChange = '';
    let changed = false;
    const changing = (async () => {
      await other.startTransaction();
      await change(other.manager);
      const [{ status }] = (await other.query(`SELECT status FROM operations WHERE id = $1`, [operationId])) as {
        status: string;
      }[];
      statusSeenByChange = status;
      await other.commitTransaction();
    })().finally(() => (changed = true));
    await waitFor(
      async () => changed || (await lockWaiters(db)) >= 2,
      (done) => done,
    );
    await holder.commitTransaction();
    const written = await writing;
    await changing;
    return { written, statusSeenByChange };
  });
}

/**
 * A session of the test's own holding the execution's row (FOR UPDATE) until unlockRow: a request that writes the
 * execution (a cancel) then waits in Postgres for as long as the test likes, and lockWaiters sees it waiting.
 */
export async function lockExecutionRow(db: DataSource, executionId: string): Promise<QueryRunner> {
  const holder = db.createQueryRunner();
  await holder.connect();
  await holder.startTransaction();
  await holder.query(`SELECT 1 FROM executions WHERE id = $1 FOR UPDATE`, [executionId]);
  return holder;
}

/** Lets go of a row lockExecutionRow holds. */
export async function unlockRow(holder: QueryRunner): Promise<void> {
  await holder.rollbackTransaction();
  await holder.release();
}
