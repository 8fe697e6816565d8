import { newId } from '@verity/platform';
import { RECHECK_OWED_STATUSES } from '@verity/status-model';
import { Queryable, isoInstant, rows, sqlLiterals, withinTransaction } from './sql';

/** The turn of one request: its recording transaction holds it to its end, and a claim takes it first. */
const REQUEST_TURN = `pg_advisory_xact_lock(hashtextextended('recheck_requests' || chr(31) || $1, 0))`;

/**
 * How long a used request is kept after its use: the record of who asked, beside the event written in their name,
 * while a replay of its job may still name it (a replay finds it used, or gone, and writes nothing either way).
 * An unused request has no maximum age: the API answered 202 and promised the result as events, so a job that runs
 * late (reconcilers down, a backed-up queue) still reads in the reviewer's name, its events saying when they asked.
 */
export const USED_RECHECK_REQUEST_RETENTION_SECONDS = 60 * 60;

/**
 * How long the unused requests of an operation that left its hold (a reviewer's decision, or a re-check's own read,
 * VERIFIED or FAILED at the same attempt) are kept after it left (its `updated_at`, which every transition sets): a
 * re-check that looked while it was held reads the source, then claims its request as it writes what it found, and
 * may do so after the operation left (a read that shows the effect after a reviewer's FAILED is still written). A job
 * that starts after the decision reads nothing and answers with its request (`decided_meanwhile`, no read); one whose
 * job was lost would otherwise stay unused forever. Two hours: longer than the longest read a connector may make
 * (CONNECTOR_TIMEOUT_MS is at most an hour) plus a retried job's wait, so a read that began while the operation was
 * held always finds its request. A reviewer's re-check written after the decision (`decided_meanwhile`,
 * `refutation_on_record`) stamps `updated_at` too, so the grace of the other unused requests runs from the last such
 * write: a bounded delay, each such write using a request of the hold (claimed in its transaction), and requests
 * being recorded only while the API finds the operation held — at most one per request.
 */
export const LEFT_HOLD_RECHECK_REQUEST_GRACE_SECONDS = 2 * 60 * 60;

/**
 * Usable: not used yet, and made for the hold the operation is in now — the attempt it was recorded at. The attempt
 * tie is defensive: the status model lets only a never-sent hold be sent again, and a never-sent operation is never
 * re-checked, so a re-checkable operation does not reach a later attempt today; it keeps a request from speaking
 * about another hold should that change. A request with no attempt was recorded by an API of the version before (a
 * rolling update): usable while unused.
 */
const USABLE = `used_at IS NULL
     AND (attempt IS NULL OR attempt = (SELECT o.attempt FROM operations o WHERE o.id = $2))`;

export const RECHECK_REQUEST_SQL = {
  // The request's turn is taken with the row and held until the transaction that enqueues its job ends.
  record: `INSERT INTO recheck_requests (id, tenant_id, operation_id, requested_by, attempt)
     SELECT $1, $2, $3, $4, (SELECT o.attempt FROM operations o WHERE o.id = $3) FROM (SELECT ${REQUEST_TURN}) AS turn`,
  turn: `SELECT ${REQUEST_TURN}`,
  // Used once: of a job run twice (replayed, retried by hand, or pointed at it by edited data), one claims it.
  claim: `UPDATE recheck_requests SET used_at = clock_timestamp()
     WHERE id = $1 AND operation_id = $2 AND ${USABLE}
     RETURNING requested_by`,
  unused: `SELECT requested_by, ${isoInstant('requested_at')} AS requested_at FROM recheck_requests
     WHERE id = $1 AND operation_id = $2 AND ${USABLE}`,
  // Those no job can use any more, in two walks each on a partial index of its own rows (the migration
  // RecheckRequestPruneIndexes), so a sweep does not walk again past rows that cannot go yet: used ones more than
  // USED_RECHECK_REQUEST_RETENTION_SECONDS after their use, in the order of use (the walk stops at the first used
  // within it); then unused ones, oldest first, made for a hold the operation has left — an earlier attempt, or no
  // longer in a status a re-check applies to (RECHECK_OWED_STATUSES) since more than
  // LEFT_HOLD_RECHECK_REQUEST_GRACE_SECONDS. An unused request of the hold the operation is in is never deleted,
  // however old: it is still owed its read. (Of an operation deleted, its requests go with it: the foreign key
  // cascades.) The cut-off is a sub-select, computed once: a bare clock_timestamp() (volatile) bounds no index walk.
  pruneUnusable: `DELETE FROM recheck_requests WHERE id IN (
       SELECT unusable.id FROM (
         (SELECT r.id FROM recheck_requests r
          WHERE r.used_at IS NOT NULL AND r.used_at <= (SELECT clock_timestamp() - make_interval(secs => $2))
          ORDER BY r.used_at LIMIT $1)
         UNION ALL
         (SELECT r.id FROM recheck_requests r JOIN operations o ON o.id = r.operation_id
          WHERE r.used_at IS NULL
            AND (r.attempt <> o.attempt
                 OR (o.status NOT IN (${sqlLiterals(RECHECK_OWED_STATUSES)})
                     AND o.updated_at <= clock_timestamp() - make_interval(secs => $3)))
          ORDER BY r.requested_at LIMIT $1)
       ) AS unusable LIMIT $1
     ) RETURNING id`,
} as const;

/**
 * Records that the key `requestedBy` asked for a re-check of the operation now; returns the request's id, the only
 * thing the re-check job carries of it. Made in the transaction that enqueues the job (`db` is that transaction's):
 * the request's turn is held to its end, so a reconciler that takes the job before the commit waits for it.
 */
export async function recordRecheckRequest(
  db: Queryable,
  input: { tenantId: string; operationId: string; requestedBy: string },
): Promise<string> {
  const id = newId('rcq');
  await rows(db, RECHECK_REQUEST_SQL.record, [id, input.tenantId, input.operationId, input.requestedBy]);
  return id;
}

/** A usable recorded request as its re-check names it: the reviewer's key, and when they asked (ISO 8601, UTC). */
export interface RecheckRequestShown {
  requestedBy: string;
  requestedAt: string;
}

/**
 * The reviewer who made the recorded request `requestId` of the operation and when, while it is usable; null when no
 * such request was recorded for that operation, or it was used already, or was made for an earlier hold of the
 * operation (another attempt). However long ago it was made: a late read says when it was asked for. Nothing is
 * claimed: a re-check reads the source first and claims the request in the transaction that writes what it found
 * (claimRecheckRequest), so an attempt that fails before or while writing leaves it for the job's next attempt. The
 * request's turn first, as for a claim.
 */
export async function unusedRecheckRequest(
  db: Queryable,
  requestId: string,
  operationId: string,
): Promise<RecheckRequestShown | null> {
  const row = await requestInTurn<{ requested_by: string; requested_at: string }>(
    db,
    RECHECK_REQUEST_SQL.unused,
    requestId,
    operationId,
  );
  return row ? { requestedBy: row.requested_by, requestedAt: row.requested_at } : null;
}

/**
 * Claims the recorded request `requestId` of the operation for its re-check: the key id of the reviewer who asked, or
 * null when no such request is usable (as for unusedRecheckRequest) — then nothing may be written in a person's name.
 * Made in the transaction that writes the re-check's event (`db` is that transaction's), so the request is used
 * exactly when its event is written. The request's turn first: a recording still under way (its job was taken
 * before its transaction committed) is waited for, and the claim's own statement then sees it.
 */
export async function claimRecheckRequest(
  db: Queryable,
  requestId: string,
  operationId: string,
): Promise<string | null> {
  const row = await requestInTurn<{ requested_by: string }>(db, RECHECK_REQUEST_SQL.claim, requestId, operationId);
  return row?.requested_by ?? null;
}

/** The request's turn, then `sql` (a look or the claim) for the request's row. */
async function requestInTurn<Row>(
  db: Queryable,
  sql: string,
  requestId: string,
  operationId: string,
): Promise<Row | null> {
  return withinTransaction(db, async (tx) => {
    await rows(tx, RECHECK_REQUEST_SQL.turn, [requestId]);
    const [row] = await rows<Row>(tx, sql, [requestId, operationId]);
    return row ?? null;
  });
}

/**
 * Deletes up to `limit` requests no re-check can use any more — used more than USED_RECHECK_REQUEST_RETENTION_SECONDS
 * ago; or unused and made for a hold the operation has left: an earlier attempt, or the operation out of the statuses
 * a re-check applies to for more than LEFT_HOLD_RECHECK_REQUEST_GRACE_SECONDS — the used first; the number deleted.
 * An unused request of the operation's current hold stays, however old. A job that names a deleted one finds no
 * request, which it treats as a used one: it reads and writes nothing.
 */
export async function pruneUnusableRecheckRequests(db: Queryable, limit: number): Promise<number> {
  const pruned = await rows<{ id: string }>(db, RECHECK_REQUEST_SQL.pruneUnusable, [
    limit,
    USED_RECHECK_REQUEST_RETENTION_SECONDS,
    LEFT_HOLD_RECHECK_REQUEST_GRACE_SECONDS,
  ]);
  return pruned.length;
}
