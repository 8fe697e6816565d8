import { OperationStatus } from '@verity/status-model';
import { Queryable, rows, sqlLiterals } from './sql';

/**
 * What the Prometheus scrape reads. Deliberately across every tenant: only the platform operator sees /metrics.
 */
export const METRICS_SQL = {
  executionsByStatus: `SELECT status, count(*)::int AS n FROM executions GROUP BY status`,
  operationsByStatus: `SELECT status, count(*)::int AS n FROM operations GROUP BY status`,
  eventsByType: `SELECT type, coalesce(to_status, '') AS to_status, count(*)::int AS n FROM events GROUP BY 1, 2`,
  overdueObligations: `SELECT count(*)::int AS n FROM operations
     WHERE status = ${sqlLiterals([OperationStatus.MANUAL_REVIEW])} AND (obligation->>'due_at')::timestamptz < now()`,
} as const;

export interface PlatformCounts {
  executions: { status: string; n: number }[];
  operations: { status: string; n: number }[];
  transitions: { type: string; to_status: string; n: number }[];
  overdueObligations: number;
}

export async function platformCounts(db: Queryable): Promise<PlatformCounts> {
  const [executions, operations, transitions, overdue] = await Promise.all([
    rows<{ status: string; n: number }>(db, METRICS_SQL.executionsByStatus),
    rows<{ status: string; n: number }>(db, METRICS_SQL.operationsByStatus),
    rows<{ type: string; to_status: string; n: number }>(db, METRICS_SQL.eventsByType),
    rows<{ n: number }>(db, METRICS_SQL.overdueObligations),
  ]);
  return { executions, operations, transitions, overdueObligations: overdue[0]?.n ?? 0 };
}
