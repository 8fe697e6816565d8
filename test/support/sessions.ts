import type { DataSource, QueryRunner } from 'typeorm';

/**
 * Runs `body` with sessions of their own on `db`, one per name (connected query runners): the transactions a race
 * between writers is made of. However `body` ends, each session's open transaction is rolled back, then each is
 * released, so a failed test leaves no lock behind for the next one.
 */
export async function withSessions<K extends string, T>(
  db: DataSource,
  names: readonly K[],
  body: (sessions: Record<K, QueryRunner>) => Promise<T>,
): Promise<T> {
  const runners = names.map(() => db.createQueryRunner());
  try {
    for (const runner of runners) await runner.connect();
    return await body(Object.fromEntries(names.map((name, i) => [name, runners[i]])) as Record<K, QueryRunner>);
  } finally {
    for (const runner of runners) if (runner.isTransactionActive) await runner.rollbackTransaction();
    for (const runner of runners) await runner.release();
  }
}
