import type { DataSource } from 'typeorm';
import { waitFor } from './stack';

/**
 * How many other sessions of this database wait on a lock — only those running a statement LIKE `statementLike` when
 * given. A test proves an order ("the revocation waits for the decision's lock") on this, never on a sleep.
 */
export async function lockWaiters(db: DataSource, statementLike?: string): Promise<number> {
  const [{ n }] = (await db.query(
    `SELECT count(*)::int AS n FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()
        AND ($1::text IS NULL OR query LIKE $1)`,
    [statementLike ?? null],
  )) as { n: number }[];
  return n;
}

/**
 * Waits until another session waits on a lock (see lockWaiters), or until `unless()` says there is nothing to wait
 * for (the statement finished without waiting).
 */
export async function waitForLockWaiter(
  db: DataSource,
  options: { statementLike?: string; unless?: () => boolean } = {},
): Promise<void> {
  await waitFor(
    async () => (options.unless?.() ?? false) || (await lockWaiters(db, options.statementLike)) > 0,
    (done) => done,
  );
}
