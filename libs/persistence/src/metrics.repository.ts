import {
  EXECUTION_STATUSES,
  ExecutionStatus,
  OPERATION_STATUSES,
  OperationStatus,
  TERMINAL_EXECUTION_STATUSES,
} from '@verity/status-model';
import { Queryable, rows, sqlLiterals } from './sql';

/** Executions still moving: the statuses the partial index `executions_active` holds. */
export const IN_FLIGHT_EXECUTION_STATUSES: readonly ExecutionStatus[] = EXECUTION_STATUSES.filter(
  (s) => !TERMINAL_EXECUTION_STATUSES.includes(s),
);

/** Operations not yet at rest: the statuses the partial index `operations_unsettled` holds. */
export const IN_FLIGHT_OPERATION_STATUSES: readonly OperationStatus[] = OPERATION_STATUSES.filter(
  (s) => s !== OperationStatus.VERIFIED && s !== OperationStatus.FAILED && s !== OperationStatus.CANCELLED,
);

/** How far an open obligation is past its due time (`not_due` until then). */
export const OBLIGATION_AGES = ['not_due', 'overdue_lt_1h', 'overdue_1h_to_24h', 'overdue_gt_24h'] as const;
export type ObligationAge = (typeof OBLIGATION_AGES)[number];

/**
 * What the Prometheus scrape reads. Deliberately across every tenant: only the platform operator sees /metrics.
 *
 * Cost is bounded by the work in flight, never by history: each statement is answerable from a partial index that
 * holds only unfinished rows (`executions_active`, `operations_unsettled`; the conditions below match their
 * predicates so the planner can use them), and none reads the events table. Totals over history (transitions,
 * submissions) are counters each process keeps as it works (libs/platform metrics.ts).
 */
export const METRICS_SQL = {
  executionsInFlight: `SELECT status, count(*)::int AS n FROM executions
     WHERE status NOT IN (${sqlLiterals(TERMINAL_EXECUTION_STATUSES)}) GROUP BY status`,
  operationsInFlight: `SELECT status, count(*)::int AS n FROM operations
     WHERE status IN (${sqlLiterals(IN_FLIGHT_OPERATION_STATUSES)}) GROUP BY status`,
  obligationsByAge: `SELECT CASE
       WHEN due IS NULL OR due >= now() THEN 'not_due'
       WHEN due >= now() - interval '1 hour' THEN 'overdue_lt_1h'
       WHEN due >= now() - interval '24 hours' THEN 'overdue_1h_to_24h'
       ELSE 'overdue_gt_24h' END AS age, count(*)::int AS n
     FROM (SELECT (obligation->>'due_at')::timestamptz AS due FROM operations
           WHERE status = ${sqlLiterals([OperationStatus.MANUAL_REVIEW])} AND obligation->'resolution' IS NULL) held
     GROUP BY 1`,
} as const;

export interface PlatformCounts {
  /** Every in-flight status, 0 when none is in it (a series that vanishes reads as "no data", not as zero). */
  executions: Partial<Record<ExecutionStatus, number>>;
  operations: Partial<Record<OperationStatus, number>>;
  obligations: Record<ObligationAge, number>;
}

function tally<K extends string>(keys: readonly K[], found: { key: string; n: number }[]): Record<K, number> {
  const out = Object.fromEntries(keys.map((k) => [k, 0])) as Record<K, number>;
  for (const row of found) if (row.key in out) out[row.key as K] = row.n;
  return out;
}

export async function platformCounts(db: Queryable): Promise<PlatformCounts> {
  const [executions, operations, obligations] = await Promise.all([
    rows<{ status: string; n: number }>(db, METRICS_SQL.executionsInFlight),
    rows<{ status: string; n: number }>(db, METRICS_SQL.operationsInFlight),
    rows<{ age: string; n: number }>(db, METRICS_SQL.obligationsByAge),
  ]);
  return {
    executions: tally(
      IN_FLIGHT_EXECUTION_STATUSES,
      executions.map((r) => ({ key: r.status, n: r.n })),
    ),
    operations: tally(
      IN_FLIGHT_OPERATION_STATUSES,
      operations.map((r) => ({ key: r.status, n: r.n })),
    ),
    obligations: tally(
      OBLIGATION_AGES,
      obligations.map((r) => ({ key: r.age, n: r.n })),
    ),
  };
}
