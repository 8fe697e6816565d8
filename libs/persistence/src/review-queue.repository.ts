import { OperationStatus, TerminalReason } from '@verity/status-model';
import { EntityManager } from 'typeorm';
import { ExecutionEntity, OperationEntity } from './entities';
import { Queryable, rows, sqlLiterals } from './sql';
import { cutAtBytes, keptPage } from './page-bytes';
import { type SecretsHeld, hydrate, selectEntities, withColumns, withSecretsHeld } from './store';

export type ReviewQueue = 'approvals' | 'manual_reviews';

export interface ReviewQueueFilter {
  connector?: string;
  q?: string;
  /** Held operations only (the manual_reviews queue). */
  reason?: TerminalReason;
  escalated?: boolean;
}

const PREPARED = sqlLiterals([OperationStatus.PREPARED]);
const MANUAL_REVIEW = sqlLiterals([OperationStatus.MANUAL_REVIEW]);

/**
 * The review console's two work queues, over `operations`, tenant-scoped (I9). One statement per queue: a filter the
 * reviewer did not set is a null parameter. An approval request whose execution's deadline has passed is in neither
 * the queue nor its count: it can no longer be approved (the approval statement checks the same deadline). Params are not searched: a substring search over them would let anyone
 * probe for a secret's value. `%` and `_` typed by a reviewer are literal (see likePattern).
 */
export const QUEUE_FILTER = `FROM operations o JOIN executions e ON e.id = o.execution_id AND e.tenant_id = o.tenant_id
     WHERE o.tenant_id = $1
       AND (($2::text = 'approvals' AND o.status = ${PREPARED} AND o.approval->>'state' = 'requested'
             AND e.deadline_at > clock_timestamp())
         OR ($2::text = 'manual_reviews' AND o.status = ${MANUAL_REVIEW}
             AND ($3::text IS NULL OR o.obligation->>'reason' = $3)
             AND ($4::boolean IS NULL OR (o.obligation->>'escalated_at' IS NOT NULL) = $4)))
       AND ($5::text IS NULL OR o.connector = $5)
       AND ($6::text IS NULL OR o.id = $6 OR o.execution_id = $6 OR o.key ILIKE $7 OR o.action ILIKE $7
            OR e.intent ILIKE $7 OR e.agent_id ILIKE $7)`;

export const REVIEW_QUEUE_SQL = {
  // The queue's count, and whether the tenant holds any secret for the connectors that take them ($8; withSecretsHeld):
  // what the page is redacted with, told by the page's first statement (an empty queue's too).
  countWithSecretsHeld: withSecretsHeld(`SELECT count(*)::int AS n ${QUEUE_FILTER}`, 1, 8),
  // The page's operations, at most $9 - 1 and fewer once their stored text (uncompressed) would pass $10 (cutAtBytes):
  // read, sized and cut in one statement.
  // Measured after the limit: in the filter's own select list, the planner rendered every operation of the queue as
  // text before sorting (seconds on a queue of 100,000), not the page's alone.
  page: cutAtBytes(
    `SELECT {columns:Operation s}, octet_length(s::text)::float8 AS page_row_bytes
     FROM (SELECT o.id ${QUEUE_FILTER}
       AND ($8::text IS NULL OR o.id < $8)
     ORDER BY o.id DESC LIMIT $9) p JOIN operations s ON s.id = p.id`,
    'id DESC',
    9,
    10,
  ),
  executions: `SELECT {columns:Execution t} FROM executions t WHERE t.id = ANY($1) AND t.tenant_id = $2`,
  counts: `SELECT count(*) FILTER (WHERE status = ${PREPARED} AND approval->>'state' = 'requested'
              AND EXISTS (SELECT 1 FROM executions e WHERE e.id = execution_id AND e.deadline_at > clock_timestamp()))
              AS approvals,
            count(*) FILTER (WHERE status = ${MANUAL_REVIEW}) AS manual_reviews,
            count(*) FILTER (WHERE status = ${MANUAL_REVIEW} AND obligation->>'escalated_at' IS NOT NULL) AS escalated,
            count(*) FILTER (WHERE status = ${MANUAL_REVIEW} AND (obligation->>'due_at')::timestamptz < now()
                               AND obligation->'resolution' IS NULL) AS overdue
       FROM operations
      WHERE tenant_id = $1 AND status IN (${PREPARED}, ${MANUAL_REVIEW})`,
} as const;

/** `%` and `_` typed by a reviewer are literal characters, not wildcards. */
function likePattern(text: string): string {
  return `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

/** The parameters $1 to $7 of QUEUE_FILTER: a filter the reviewer did not set is null. */
export function filterParams(tenantId: string, queue: ReviewQueue, filter: ReviewQueueFilter): unknown[] {
  const held = queue === 'manual_reviews';
  return [
    tenantId,
    queue,
    held ? (filter.reason ?? null) : null,
    held ? (filter.escalated ?? null) : null,
    filter.connector ?? null,
    filter.q ?? null,
    filter.q ? likePattern(filter.q) : null,
  ];
}

/** One page of a queue (reviewQueuePage). */
export interface ReviewQueuePage {
  operations: OperationEntity[];
  more: boolean;
  total: number;
  executions: ExecutionEntity[];
  /** The stored text of the page's operations (uncompressed), as the page was cut by. */
  bytes: number;
}

/**
 * One page of a queue, newest first by id (ids are time-ordered, so the id is also a stable cursor): up to `limit`
 * operations after `cursor`, whether more follow, the queue's total, and the page's executions.
 */
export async function reviewQueuePage(
  db: EntityManager,
  tenantId: string,
  queue: ReviewQueue,
  filter: ReviewQueueFilter & { cursor?: string; limit: number },
): Promise<ReviewQueuePage> {
  return (await reviewQueuePageWithSecretsHeld(db, tenantId, queue, filter, [])).found;
}

/**
 * The page (reviewQueuePage), and whether the tenant holds any secret for `secretConnectors` (every connector that
 * takes them; withSecretsHeld), told by its first statement — of an empty queue too.
 */
export async function reviewQueuePageWithSecretsHeld(
  db: EntityManager,
  tenantId: string,
  queue: ReviewQueue,
  filter: ReviewQueueFilter & { cursor?: string; limit: number; maxBytes?: number },
  secretConnectors: readonly string[],
): Promise<SecretsHeld<ReviewQueuePage>> {
  const params = filterParams(tenantId, queue, filter);
  const [counted] = await rows<{ n: number; holds_secrets: boolean }>(db, REVIEW_QUEUE_SQL.countWithSecretsHeld, [
    ...params,
    secretConnectors,
  ]);
  const total = counted.n;
  const found = await rows<Record<string, unknown>>(db, withColumns(db, REVIEW_QUEUE_SQL.page), [
    ...params,
    filter.cursor ?? null,
    filter.limit + 1,
    filter.maxBytes ?? Infinity,
  ]);
  const { rows: kept, more, bytes } = keptPage<Record<string, unknown>>(found);
  const operations = kept.map((raw) => hydrate(db, OperationEntity, raw));
  const executions = operations.length
    ? await selectEntities(db, ExecutionEntity, REVIEW_QUEUE_SQL.executions, [
        [...new Set(operations.map((op) => op.executionId))],
        tenantId,
      ])
    : [];
  return {
    found: { operations, more, total, executions, bytes },
    holdsSecrets: counted.holds_secrets !== false,
  };
}

export async function reviewQueueCounts(
  db: Queryable,
  tenantId: string,
): Promise<{ approvals: number; manual_reviews: number; escalated: number; overdue: number }> {
  const [row] = await rows<Record<'approvals' | 'manual_reviews' | 'escalated' | 'overdue', string>>(
    db,
    REVIEW_QUEUE_SQL.counts,
    [tenantId],
  );
  return {
    approvals: Number(row.approvals),
    manual_reviews: Number(row.manual_reviews),
    escalated: Number(row.escalated),
    overdue: Number(row.overdue),
  };
}
