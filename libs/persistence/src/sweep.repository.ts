import {
  ExecutionStatus,
  FINAL_OPERATION_STATUSES,
  FINAL_WITHOUT_READ_BACK_STATUSES,
  OperationStatus,
  RECHECK_OWED_STATUSES,
  RECONCILE_OWED_STATUSES,
  RELEASABLE_EXECUTION_STATUSES,
  TERMINAL_EXECUTION_STATUSES,
  VERIFY_OWED_STATUSES,
  VerificationMethod,
} from '@verity/status-model';
import { DataSource, EntityManager } from 'typeorm';
import { OperationEntity } from './entities';
import { Queryable, rows, sqlLiterals } from './sql';
import { hydrate, selectEntities, withColumns } from './store';

const S = OperationStatus;
const TERMINAL = sqlLiterals(TERMINAL_EXECUTION_STATUSES);

/** The sweeper's Postgres advisory lock: exactly one sweep runs at a time however many reconcilers run. */
export const SWEEP_LOCK = 727_002;

/**
 * The sweep's statements. The sweep works across every tenant: it re-derives, from rows, every job the system owes.
 * Each read is a bounded batch ($n: the batch size), oldest first.
 */
export const SWEEP_SQL = {
  tryLock: `SELECT pg_try_advisory_lock($1) AS locked`,
  unlock: `SELECT pg_advisory_unlock($1)`,
  startLog: `INSERT INTO sweep_log (worker) VALUES ($1) RETURNING id`,
  finishLog: `UPDATE sweep_log SET finished_at = clock_timestamp(), report = $2 WHERE id = $1`,
  // On the database's clock; the newest row by its key (no row: no sweep ever started).
  msSinceLastSweep: `SELECT (extract(epoch FROM clock_timestamp() - started_at) * 1000)::float8 AS ms
     FROM sweep_log ORDER BY id DESC LIMIT 1`,
  executionsPastDeadline: `SELECT id FROM executions WHERE status NOT IN (${TERMINAL}) AND deadline_at <= now()
     ORDER BY deadline_at LIMIT $1`,
  staleExecutions: `SELECT id FROM executions
     WHERE status NOT IN (${TERMINAL})
       AND updated_at < now() - make_interval(secs => $1 / 1000.0)
     ORDER BY updated_at LIMIT $2`,
  // Ended executions whose stored outcome still has a pending verdict for an operation that has since become final
  // (a person resolved its hold, and the advance job that would have judged it again was lost): owed an advance, which
  // records the verdicts again — also under an outcome already `unmet` by another criterion. Only executions with a
  // pending verdict are read (a partial index holds just those), and only moves older than the stale bound, so the
  // advance the move enqueued itself is not doubled. Also those whose criteria were never evaluated (ended before the
  // dispatcher's first advance, which was lost): on the wire their verdicts are pending too.
  endedWithStaleOutcome: `SELECT x.id FROM executions x
     WHERE x.status IN (${TERMINAL})
       AND (x.criteria_results @> '[{"verdict": "pending"}]'::jsonb
            OR (x.criteria_results IS NULL AND x.criteria <> '[]'::jsonb))
       AND (x.criteria_results IS NULL AND x.updated_at < now() - make_interval(secs => $1 / 1000.0)
            OR EXISTS (
         SELECT 1 FROM jsonb_array_elements(coalesce(x.criteria_results, '[]'::jsonb)) c
         CROSS JOIN LATERAL (
           SELECT o.status, o.verification_method, o.updated_at FROM operations o
           WHERE o.execution_id = x.id AND o.key = c->>'operation'
           ORDER BY o.generation DESC LIMIT 1) o
         WHERE c->>'verdict' = 'pending'
           AND (o.status IN (${sqlLiterals(FINAL_OPERATION_STATUSES)})
                OR (o.status IN (${sqlLiterals(FINAL_WITHOUT_READ_BACK_STATUSES)})
                    AND o.verification_method <> '${VerificationMethod.READ_AFTER_WRITE}'))
           AND o.updated_at < now() - make_interval(secs => $1 / 1000.0)))
     LIMIT $2`,
  sentBefore: `SELECT {columns:Operation o} FROM operations o
     WHERE o.status = ${sqlLiterals([S.SENT])} AND o.sent_at < now() - make_interval(secs => $1 / 1000.0)
     LIMIT $2`,
  // A held operation is owed a re-check only while its next_check_at is set: the row, not Redis, says it is owed; and
  // which one (its due time, which the re-armed job carries).
  owedChecks: `SELECT id, execution_id, status, verification_method, next_check_at IS NOT NULL AS recheck_scheduled,
       next_check_at
     FROM operations
     WHERE ((status IN (${sqlLiterals(VERIFY_OWED_STATUSES)})
               AND verification_method = ${sqlLiterals([VerificationMethod.READ_AFTER_WRITE])})
            OR status IN (${sqlLiterals(RECONCILE_OWED_STATUSES)})
            OR (status IN (${sqlLiterals(RECHECK_OWED_STATUSES)}) AND next_check_at IS NOT NULL))
       AND coalesce(next_check_at, updated_at) < now() - make_interval(secs => $1 / 1000.0)
     ORDER BY updated_at LIMIT $2`,
  // A reviewer's release (resolution SENT) of a held, never-sent operation (attempt 0: see everSent), recorded more than
  // $1 ms ago and still not carried out: its dispatch job is owed. Every execution status is included: a release whose
  // execution ended is refused by the send guard and withdrawn, which hands the decision back to a reviewer.
  unsentReleases: `SELECT id, execution_id FROM operations
     WHERE status = ${sqlLiterals([S.MANUAL_REVIEW])} AND attempt = 0
       AND obligation->'resolution'->>'status' = ${sqlLiterals([S.SENT])}
       AND (obligation->'resolution'->>'at')::timestamptz < now() - make_interval(secs => $1 / 1000.0)
     ORDER BY (obligation->'resolution'->>'at')::timestamptz LIMIT $2`,
  // A held operation never sent (attempt 0: see heldNeverSent) whose execution ended so that nothing of it is sent any
  // more (a status outside RELEASABLE_EXECUTION_STATUSES, the set the cancel's own statement checks): the cancel and the
  // expiry end such holds with the execution, so these were left by a path that did not (rows from before they did).
  // Oldest hold first; only the held rows are scanned (operations_unsettled), each execution by its key.
  heldOfEndedExecutions: `SELECT {columns:Operation o o__}, e.status AS e__status FROM operations o
     JOIN executions e ON e.id = o.execution_id
     WHERE o.status = ${sqlLiterals([S.MANUAL_REVIEW])} AND o.attempt = 0
       AND e.status NOT IN (${sqlLiterals(RELEASABLE_EXECUTION_STATUSES)})
     ORDER BY o.updated_at LIMIT $1`,
  // Operations older than the observation window stop being observed.
  retireObservations: `UPDATE operations SET next_check_at = NULL WHERE id IN (
       SELECT id FROM operations
       WHERE status = ${sqlLiterals([S.VERIFIED])} AND next_check_at IS NOT NULL
         AND created_at <= now() - make_interval(secs => $1 / 1000.0)
       LIMIT $2)`,
  // Claimed by moving next_check_at on, so a second sweep (or a slow one) does not hand the same read out twice.
  claimDueObservations: `WITH due AS (
       SELECT id FROM operations
       WHERE status = ${sqlLiterals([S.VERIFIED])} AND next_check_at IS NOT NULL AND next_check_at <= now()
         AND created_at > now() - make_interval(secs => $1 / 1000.0)
       ORDER BY next_check_at LIMIT $2 FOR UPDATE SKIP LOCKED
     )
     UPDATE operations o SET next_check_at = now() + make_interval(secs => $3 / 1000.0)
     FROM due WHERE o.id = due.id RETURNING o.id, o.execution_id`,
  overdueObligations: `SELECT {columns:Operation o} FROM operations o
     WHERE o.status = ${sqlLiterals([S.MANUAL_REVIEW])} AND (o.obligation->>'due_at')::timestamptz < now()
       AND o.obligation->>'escalated_at' IS NULL AND o.obligation->'resolution' IS NULL
     LIMIT $1`,
  // Traces on only: the trace each re-enqueued job joins (its execution's).
  executionTraceParents: `SELECT id, trace_parent FROM executions
     WHERE id = ANY($1::text[]) AND trace_parent IS NOT NULL`,
  operationTraceParents: `SELECT o.id, e.trace_parent FROM operations o JOIN executions e ON e.id = o.execution_id
     WHERE o.id = ANY($1::text[]) AND e.trace_parent IS NOT NULL`,
} as const;

/**
 * Runs `sweep` only if no other sweep is running anywhere: a session-level advisory lock on a connection of its own,
 * held for the whole sweep (null when another holds it). The run is logged in sweep_log with what `sweep` returns.
 */
export async function withSweepLock<R>(
  dataSource: DataSource,
  worker: string,
  sweep: () => Promise<R>,
): Promise<R | null> {
  const runner = dataSource.createQueryRunner();
  await runner.connect();
  try {
    const [{ locked }] = (await runner.query(SWEEP_SQL.tryLock, [SWEEP_LOCK])) as { locked: boolean }[];
    if (!locked) return null;
    try {
      const [{ id: logId }] = (await runner.query(SWEEP_SQL.startLog, [worker])) as { id: string }[];
      const report = await sweep();
      await runner.query(SWEEP_SQL.finishLog, [logId, JSON.stringify(report)]);
      return report;
    } finally {
      await runner.query(SWEEP_SQL.unlock, [SWEEP_LOCK]);
    }
  } finally {
    await runner.release();
  }
}

/** How long ago (ms, on the database's clock) the last sweep of any reconciler started; null when none ever did. */
export async function msSinceLastSweep(db: Queryable): Promise<number | null> {
  const [row] = await rows<{ ms: number | null }>(db, SWEEP_SQL.msSinceLastSweep, []);
  return row?.ms ?? null;
}

async function ids(db: Queryable, sql: string, params: unknown[]): Promise<string[]> {
  return (await rows<{ id: string }>(db, sql, params)).map((r) => r.id);
}

/** Executions past their deadline that are not terminal yet. */
export function executionsPastDeadline(db: Queryable, limit: number): Promise<string[]> {
  return ids(db, SWEEP_SQL.executionsPastDeadline, [limit]);
}

/** Executions that are not terminal and have not moved for `olderThanMs`. */
export function staleExecutions(db: Queryable, olderThanMs: number, limit: number): Promise<string[]> {
  return ids(db, SWEEP_SQL.staleExecutions, [olderThanMs, limit]);
}

/**
 * Ended executions whose outcome still holds a pending verdict for an operation that became final more than
 * `olderThanMs` ago: the advance that judges it again was lost.
 */
export function endedWithStaleOutcome(db: Queryable, olderThanMs: number, limit: number): Promise<string[]> {
  return ids(db, SWEEP_SQL.endedWithStaleOutcome, [olderThanMs, limit]);
}

/** Operations SENT more than `olderThanMs` ago. */
export function operationsSentBefore(
  db: EntityManager,
  olderThanMs: number,
  limit: number,
): Promise<OperationEntity[]> {
  return selectEntities(db, OperationEntity, SWEEP_SQL.sentBefore, [olderThanMs, limit]);
}

/** Operations owed a check (see owedCheck in libs/status-model) whose check is overdue by `olderThanMs`. */
export function operationsOwedChecks(
  db: Queryable,
  olderThanMs: number,
  limit: number,
): Promise<
  {
    id: string;
    execution_id: string;
    status: OperationStatus;
    verification_method: string;
    recheck_scheduled: boolean;
    /** When the check was due: for a held operation, the automatic re-check owed (its chain's due time). */
    next_check_at: Date | null;
  }[]
> {
  return rows(db, SWEEP_SQL.owedChecks, [olderThanMs, limit]);
}

/**
 * Held, never-sent operations whose reviewer's release (resolve SENT) was recorded more than `olderThanMs` ago and has
 * not been carried out (still MANUAL_REVIEW, attempt 0), oldest release first.
 */
export function unsentReleases(
  db: Queryable,
  olderThanMs: number,
  limit: number,
): Promise<{ id: string; execution_id: string }[]> {
  return rows(db, SWEEP_SQL.unsentReleases, [olderThanMs, limit]);
}

/**
 * Held, never-sent operations whose execution has ended unreleasable (cancelled, expired, failed) and that are still
 * MANUAL_REVIEW, oldest hold first, each with the status its execution ended in (which says the cause of its cancel).
 */
export async function heldOfEndedExecutions(
  db: EntityManager,
  limit: number,
): Promise<{ operation: OperationEntity; executionStatus: ExecutionStatus }[]> {
  const found = await rows<Record<string, unknown>>(db, withColumns(db, SWEEP_SQL.heldOfEndedExecutions), [limit]);
  return found.map((raw) => ({
    operation: hydrate(db, OperationEntity, raw, 'o__'),
    executionStatus: raw.e__status as ExecutionStatus,
  }));
}

/**
 * Observation after VERIFIED: stops observing operations older than `windowMs`, then claims up to `limit` whose next
 * read is due, moving their next read `intervalMs` on. Returns the claimed operations (with their execution's id).
 */
export async function claimDueObservations(
  db: Queryable,
  input: { windowMs: number; limit: number; intervalMs: number; retireBatch: number },
): Promise<{ id: string; execution_id: string }[]> {
  await rows(db, SWEEP_SQL.retireObservations, [input.windowMs, input.retireBatch]);
  return rows(db, SWEEP_SQL.claimDueObservations, [input.windowMs, input.limit, input.intervalMs]);
}

/** Held operations whose recovery obligation is overdue, not escalated yet and not resolved (no release recorded). */
export function overdueUnescalatedObligations(db: EntityManager, limit: number): Promise<OperationEntity[]> {
  return selectEntities(db, OperationEntity, SWEEP_SQL.overdueObligations, [limit]);
}

/**
 * The stored `traceparent` of each execution (`of: 'executions'`) or of each operation's execution (`of:
 * 'operations'`), by the id asked for; ids without one are absent. Read only with traces on.
 */
export async function traceParentsOf(
  db: Queryable,
  of: 'executions' | 'operations',
  idList: readonly string[],
): Promise<Map<string, string>> {
  if (idList.length === 0) return new Map();
  const sql = of === 'executions' ? SWEEP_SQL.executionTraceParents : SWEEP_SQL.operationTraceParents;
  const found = await rows<{ id: string; trace_parent: string }>(db, sql, [idList]);
  return new Map(found.map((r) => [r.id, r.trace_parent]));
}
