import { newId } from '@verity/platform';
import { Queryable, rows, withinTransaction } from './sql';

/** The turn of one request: its recording transaction holds it to its end, and a claim takes it first. */
const REQUEST_TURN = `pg_advisory_xact_lock(hashtextextended('recheck_requests' || chr(31) || $1, 0))`;

/**
 * How long a recorded request may be used. A re-check is a read made now, at a reviewer's word: its job runs at once
 * and BullMQ's attempts take seconds, a reconciler killed mid-read is run again within a minute or so. A job that
 * could not use it within the hour (its attempts spent, the reconcilers down, a failed job kept on the board and
 * re-run by hand later) no longer speaks for that reviewer; they ask again.
 */
export const RECHECK_REQUEST_MAX_AGE_SECONDS = 60 * 60;

/**
 * Usable: not used yet, younger than its maximum age (the database's clock, the one `requested_at` is on), and made
 * for the hold the operation is in now — the attempt it was recorded at (a later hold follows another send). A request
 * with no attempt was recorded by an API of the version before (a rolling update): bounded by its age only.
 */
const USABLE = `used_at IS NULL AND requested_at > clock_timestamp() - make_interval(secs => $3)
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
  unused: `SELECT requested_by FROM recheck_requests WHERE id = $1 AND operation_id = $2 AND ${USABLE}`,
  // Those no job can use any more, oldest first: past their age, or made for a hold the operation has left. A used
  // one is kept until its age like any other (its claim refuses it already): the record of who asked, beside the
  // event written in their name, while a job may still name it.
  pruneUnusable: `DELETE FROM recheck_requests WHERE id IN (
       SELECT r.id FROM recheck_requests r
       WHERE r.requested_at <= clock_timestamp() - make_interval(secs => $2)
          OR r.attempt <> (SELECT o.attempt FROM operations o WHERE o.id = r.operation_id)
       ORDER BY r.requested_at LIMIT $1
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

/**
 * The reviewer who made the recorded request `requestId` of the operation, while it is usable; null when no such
 * request was recorded for that operation, or it was used already, is older than RECHECK_REQUEST_MAX_AGE_SECONDS, or
 * was made for an earlier hold of the operation (another attempt). Nothing is claimed: a re-check reads the source
 * first and claims the request in the transaction that writes what it found (claimRecheckRequest), so an attempt that
 * fails before or while writing leaves it for the job's next attempt. The request's turn first, as for a claim.
 */
export async function unusedRecheckRequest(
  db: Queryable,
  requestId: string,
  operationId: string,
): Promise<string | null> {
  return reviewerInTurn(db, RECHECK_REQUEST_SQL.unused, requestId, operationId);
}

/**
 * Claims the recorded request `requestId` of the operation for its re-check: the key id of the reviewer who asked, or
 * null when no such request is usable (as for unusedRecheckRequest) — then nothing may be written in a person's name. Made in the transaction that writes the re-check's event (`db` is that transaction's), so the request
 * is used exactly when its event is written. The request's turn first: a recording still under way (its job was taken
 * before its transaction committed) is waited for, and the claim's own statement then sees it.
 */
export async function claimRecheckRequest(
  db: Queryable,
  requestId: string,
  operationId: string,
): Promise<string | null> {
  return reviewerInTurn(db, RECHECK_REQUEST_SQL.claim, requestId, operationId);
}

/** The request's turn, then `sql` (a look or the claim) for the reviewer it names. */
async function reviewerInTurn(
  db: Queryable,
  sql: string,
  requestId: string,
  operationId: string,
): Promise<string | null> {
  return withinTransaction(db, async (tx) => {
    await rows(tx, RECHECK_REQUEST_SQL.turn, [requestId]);
    const [row] = await rows<{ requested_by: string }>(tx, sql, [
      requestId,
      operationId,
      RECHECK_REQUEST_MAX_AGE_SECONDS,
    ]);
    return row?.requested_by ?? null;
  });
}

/**
 * Deletes up to `limit` requests no re-check can use any more — older than RECHECK_REQUEST_MAX_AGE_SECONDS (used or
 * not), or made for a hold the operation has left — oldest first; the number deleted. The table so holds about an
 * hour of requests. A job that names a deleted one finds no request, which it treats as a used one: it reads and
 * writes nothing.
 */
export async function pruneUnusableRecheckRequests(db: Queryable, limit: number): Promise<number> {
  const pruned = await rows<{ id: string }>(db, RECHECK_REQUEST_SQL.pruneUnusable, [
    limit,
    RECHECK_REQUEST_MAX_AGE_SECONDS,
  ]);
  return pruned.length;
}
