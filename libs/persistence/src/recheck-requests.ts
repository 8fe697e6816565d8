import { newId } from '@verity/platform';
import { Queryable, rows, withinTransaction } from './sql';

/** The turn of one request: its recording transaction holds it to its end, and a claim takes it first. */
const REQUEST_TURN = `pg_advisory_xact_lock(hashtextextended('recheck_requests' || chr(31) || $1, 0))`;

export const RECHECK_REQUEST_SQL = {
  // The request's turn is taken with the row and held until the transaction that enqueues its job ends.
  record: `INSERT INTO recheck_requests (id, tenant_id, operation_id, requested_by)
     SELECT $1, $2, $3, $4 FROM (SELECT ${REQUEST_TURN}) AS turn`,
  turn: `SELECT ${REQUEST_TURN}`,
  // Used once: of a job run twice (replayed, retried by hand, or pointed at it by edited data), one claims it.
  claim: `UPDATE recheck_requests SET used_at = clock_timestamp()
     WHERE id = $1 AND operation_id = $2 AND used_at IS NULL
     RETURNING requested_by`,
  unused: `SELECT requested_by FROM recheck_requests WHERE id = $1 AND operation_id = $2 AND used_at IS NULL`,
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
 * The reviewer who made the recorded request `requestId` of the operation, while it is unused; null when no such
 * request was recorded for that operation or it was used already. Nothing is claimed: a re-check reads the source
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
 * null when no such request was recorded for that operation or it was used already — then nothing may be written in a
 * person's name. Made in the transaction that writes the re-check's event (`db` is that transaction's), so the request
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
    const [row] = await rows<{ requested_by: string }>(tx, sql, [requestId, operationId]);
    return row?.requested_by ?? null;
  });
}
