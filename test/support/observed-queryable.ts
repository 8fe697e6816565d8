import type { Queryable } from '@verity/persistence';

/**
 * A real connection seen from the caller's side: every statement sent through it is recorded with its answer, and
 * the answer is handed back `answerDelayMs` after Postgres gave it (a loaded machine, a slow link).
 */
export function observedQueryable(db: Queryable, answerDelayMs = 0) {
  const seen: { sql: string; answer: unknown }[] = [];
  const queryable = {
    query: async (sql: string, parameters?: unknown[]) => {
      const answer: unknown = await db.query(sql, parameters);
      seen.push({ sql, answer });
      if (answerDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, answerDelayMs));
      return answer;
    },
  } as Queryable;
  return { queryable, seen };
}
