import { insertChargeExecution } from '../../../test/support/fixtures';
import { waitForLockWaiter } from '../../../test/support/lock-waits';
import { withSessions } from '../../../test/support/sessions';
import { useTestDatabase } from '../../../test/support/test-database';
import {
  LEFT_HOLD_RECHECK_REQUEST_GRACE_SECONDS,
  USED_RECHECK_REQUEST_RETENTION_SECONDS,
  claimRecheckRequest,
  pruneUnusableRecheckRequests,
  recordRecheckRequest,
  unusedRecheckRequest,
} from './recheck-requests';

/** A reviewer's re-check request, recorded by the API and used once by the re-check that names it. */
describe('re-check requests (real Postgres)', () => {
  const db = useTestDatabase('recheckreq', ['acme']);

  it('is claimed once, for its own operation only; an id never recorded claims nothing', async () => {
    const { operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    const { operationId: other } = await insertChargeExecution(db.dataSource.manager, 'acme');
    const id = await db.dataSource.transaction((tx) =>
      recordRecheckRequest(tx, { tenantId: 'acme', operationId, requestedBy: 'key_reviewer' }),
    );
    expect(await claimRecheckRequest(db.dataSource.manager, 'rcq_never_recorded', operationId)).toBeNull();
    expect(await claimRecheckRequest(db.dataSource.manager, id, other)).toBeNull();
    expect(await claimRecheckRequest(db.dataSource.manager, id, operationId)).toBe('key_reviewer');
    expect(await claimRecheckRequest(db.dataSource.manager, id, operationId)).toBeNull();
  });

  it('a claim made while the request is being recorded waits for its commit, then claims it', async () => {
    // The API enqueues the job inside the transaction that records the request: a reconciler can take the job first.
    const { operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    await withSessions(db.dataSource, ['api'], async ({ api }) => {
      await api.startTransaction();
      const id = await recordRecheckRequest(api.manager, {
        tenantId: 'acme',
        operationId,
        requestedBy: 'key_reviewer',
      });
      let answered = false;
      const claiming = claimRecheckRequest(db.dataSource.manager, id, operationId).finally(() => (answered = true));
      await waitForLockWaiter(db.dataSource, { unless: () => answered });
      await api.commitTransaction();
      expect(await claiming).toBe('key_reviewer');
    });
  });

  const record = async (operationId: string) =>
    db.dataSource.transaction((tx) =>
      recordRecheckRequest(tx, { tenantId: 'acme', operationId, requestedBy: 'key_reviewer' }),
    );
  /** Dates the request `seconds` earlier, as if it had been recorded (and used, if it was) that long ago. */
  const age = async (id: string, seconds: number) =>
    db.dataSource.query(
      `UPDATE recheck_requests SET requested_at = requested_at - make_interval(secs => $2),
              used_at = used_at - make_interval(secs => $2) WHERE id = $1`,
      [id, seconds],
    );
  const hour = 60 * 60;

  it('is refused, looked at or claimed, once the operation is in a later hold than the one it was made for', async () => {
    // A job replayed (a writable Bull Board) after the operation was sent again and held again: the request was a
    // reviewer's word about the earlier hold, not this one.
    const { operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    const id = await record(operationId);
    expect(await unusedRecheckRequest(db.dataSource.manager, id, operationId)).toMatchObject({
      requestedBy: 'key_reviewer',
    });
    await db.dataSource.query(`UPDATE operations SET attempt = attempt + 1 WHERE id = $1`, [operationId]);
    expect(await unusedRecheckRequest(db.dataSource.manager, id, operationId)).toBeNull();
    expect(await claimRecheckRequest(db.dataSource.manager, id, operationId)).toBeNull();
    const [row] = (await db.dataSource.query(`SELECT used_at FROM recheck_requests WHERE id = $1`, [id])) as {
      used_at: Date | null;
    }[];
    expect(row.used_at).toBeNull();
  });

  it('recorded with no attempt (by the API of the version before, during a rolling update), is usable while unused', async () => {
    const { operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    const id = await record(operationId);
    await db.dataSource.query(`UPDATE recheck_requests SET attempt = NULL WHERE id = $1`, [id]);
    await db.dataSource.query(`UPDATE operations SET attempt = attempt + 1 WHERE id = $1`, [operationId]);
    await pruneUnusableRecheckRequests(db.dataSource.manager, 100);
    expect(await claimRecheckRequest(db.dataSource.manager, id, operationId)).toBe('key_reviewer');
  });

  it('has no maximum age: unused hours later (reconcilers down, a backed-up queue), it is looked at, naming when it was asked, and claimed once', async () => {
    // The API answered 202 and promised the result as events: a late job still reads in the reviewer's name.
    const { operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    const old = await record(operationId);
    await age(old, 2 * hour);
    const [row] = (await db.dataSource.query(
      `SELECT to_char(requested_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS at FROM recheck_requests WHERE id = $1`,
      [old],
    )) as { at: string }[];
    expect(Date.now() - Date.parse(row.at)).toBeGreaterThan(2 * hour * 1000 - 60_000);
    expect(await unusedRecheckRequest(db.dataSource.manager, old, operationId)).toEqual({
      requestedBy: 'key_reviewer',
      requestedAt: row.at,
    });
    expect(await claimRecheckRequest(db.dataSource.manager, old, operationId)).toBe('key_reviewer');
    expect(await claimRecheckRequest(db.dataSource.manager, old, operationId)).toBeNull();
    expect(await unusedRecheckRequest(db.dataSource.manager, old, operationId)).toBeNull();
  });

  /** Holds the operation for a reviewer (MANUAL_REVIEW at attempt 1): a re-check applies to it. */
  const hold = async (operationId: string) =>
    db.dataSource.query(`UPDATE operations SET status = 'MANUAL_REVIEW', attempt = 1 WHERE id = $1`, [operationId]);
  /** The operation leaves its hold by a decision (its attempt kept), `secondsAgo` before now, as a transition dates it. */
  const leaveHold = async (operationId: string, status: 'VERIFIED' | 'FAILED', secondsAgo: number) =>
    db.dataSource.query(
      `UPDATE operations SET status = $2, updated_at = clock_timestamp() - make_interval(secs => $3) WHERE id = $1`,
      [operationId, status, secondsAgo],
    );
  const unusedOf = async (operationId: string) =>
    (
      (await db.dataSource.query(
        `SELECT id FROM recheck_requests WHERE operation_id = $1 AND used_at IS NULL ORDER BY id`,
        [operationId],
      )) as { id: string }[]
    ).map((r) => r.id);

  it('prunes the unused requests of an operation that left its hold by a decision (same attempt), once its grace after it left has passed', async () => {
    const { operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    await hold(operationId);
    // A burst of presses: the first job's read VERIFIES; the others' jobs were lost (Redis failed over) and never use
    // theirs (a job that starts after the decision uses its own, to say no read was made).
    const first = await record(operationId);
    await record(operationId);
    await record(operationId);
    expect(await claimRecheckRequest(db.dataSource.manager, first, operationId)).toBe('key_reviewer');
    await leaveHold(operationId, 'VERIFIED', LEFT_HOLD_RECHECK_REQUEST_GRACE_SECONDS + 60);
    // Even years later: the operation is VERIFIED for good, no job can use them.
    await db.dataSource.query(
      `UPDATE recheck_requests SET requested_at = requested_at - interval '400 days' WHERE operation_id = $1`,
      [operationId],
    );
    while ((await pruneUnusableRecheckRequests(db.dataSource.manager, 100)) > 0);
    expect(await unusedOf(operationId)).toEqual([]);
  });

  it('keeps the unused requests of an operation that left its hold within its grace: a re-check that looked while it was held still claims its own', async () => {
    // The job looked while held, read the source, and claims as it writes — after a reviewer's FAILED, a moment ago.
    const { operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    await hold(operationId);
    const id = await record(operationId);
    await age(id, 3 * hour);
    expect(await unusedRecheckRequest(db.dataSource.manager, id, operationId)).not.toBeNull();
    await leaveHold(operationId, 'FAILED', LEFT_HOLD_RECHECK_REQUEST_GRACE_SECONDS - 60);
    await pruneUnusableRecheckRequests(db.dataSource.manager, 100);
    expect(await unusedOf(operationId)).toEqual([id]);
    expect(await claimRecheckRequest(db.dataSource.manager, id, operationId)).toBe('key_reviewer');
  });

  it('prunes only the requests no job can use any more, a batch at a time: an unused one of the current hold stays however old', async () => {
    await db.dataSource.query(`DELETE FROM recheck_requests`);
    const { operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    const { operationId: sentAgain } = await insertChargeExecution(db.dataSource.manager, 'acme');
    await hold(operationId);
    const live = [await record(operationId), await record(operationId)];
    // Unused, made long ago for the hold the operation is still in: still owed its read.
    await age(live[1], 3 * hour);
    // Used a moment ago (asked for long ago): refused already, kept as the record of who asked while a job may
    // still name it.
    const used = await record(operationId);
    await age(used, 3 * hour);
    expect(await claimRecheckRequest(db.dataSource.manager, used, operationId)).toBe('key_reviewer');
    const usedLongAgo = await record(operationId);
    expect(await claimRecheckRequest(db.dataSource.manager, usedLongAgo, operationId)).toBe('key_reviewer');
    await age(usedLongAgo, USED_RECHECK_REQUEST_RETENTION_SECONDS + 1);
    // Made for a hold the operation has left: the unused one goes (none of its jobs may write); the one used a
    // moment ago is kept like any used one, an hour after its use (it can be claimed no more).
    const earlierHold = await record(sentAgain);
    const usedForEarlierHold = await record(sentAgain);
    expect(await claimRecheckRequest(db.dataSource.manager, usedForEarlierHold, sentAgain)).toBe('key_reviewer');
    await db.dataSource.query(`UPDATE operations SET attempt = attempt + 1 WHERE id = $1`, [sentAgain]);

    expect(await pruneUnusableRecheckRequests(db.dataSource.manager, 1)).toBe(1);
    expect(await pruneUnusableRecheckRequests(db.dataSource.manager, 1)).toBe(1);
    expect(await pruneUnusableRecheckRequests(db.dataSource.manager, 1)).toBe(0);
    const left = (await db.dataSource.query(`SELECT id FROM recheck_requests`)) as { id: string }[];
    expect(left.map((r) => r.id).sort()).toEqual([...live, used, usedForEarlierHold].sort());
    expect([usedLongAgo, earlierHold].some((id) => left.some((r) => r.id === id))).toBe(false);
    for (const id of live)
      expect(await claimRecheckRequest(db.dataSource.manager, id, operationId)).toBe('key_reviewer');
  });
});
