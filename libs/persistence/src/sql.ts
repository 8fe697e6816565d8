import { DataSource, EntityManager } from 'typeorm';

/** Anything that can run SQL: the DataSource's manager or a transaction's manager. */
export type Queryable = Pick<EntityManager, 'query'>;

/** TypeORM returns `[rows, count]` for UPDATE/DELETE and `rows` otherwise; callers only want rows. */
export async function rows<T>(db: Queryable, sql: string, params: unknown[] = []): Promise<T[]> {
  const result: unknown = await db.query(sql, params);
  if (Array.isArray(result) && result.length === 2 && Array.isArray(result[0]) && typeof result[1] === 'number') {
    return result[0] as T[];
  }
  return result as T[];
}

const RETRYABLE_SQLSTATES = new Set(['40001', '40P01']);

/** A transaction that is retried on serialization failures and deadlocks, which Postgres resolves by aborting one side. */
export async function transaction<T>(dataSource: DataSource, work: (tx: EntityManager) => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await dataSource.transaction(work);
    } catch (error) {
      const code = (error as { code?: string; driverError?: { code?: string } }).driverError?.code;
      if (attempt >= 5 || !code || !RETRYABLE_SQLSTATES.has(code)) throw error;
      await new Promise((resolve) => setTimeout(resolve, 5 * attempt + Math.random() * 20));
    }
  }
}

export function isUniqueViolation(error: unknown): boolean {
  const e = error as { code?: string; driverError?: { code?: string } };
  return e.code === '23505' || e.driverError?.code === '23505';
}

export function isDatabaseUnavailable(error: unknown): boolean {
  const e = error as { code?: string; driverError?: { code?: string }; message?: string };
  const code = e.driverError?.code ?? e.code ?? '';
  return (
    ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'ENOTFOUND', '57P01', '57P03', '08006', '08001', '08003'].includes(
      code,
    ) || /Connection terminated|timeout exceeded when trying to connect|connect ECONNREFUSED/i.test(e.message ?? '')
  );
}
