import { chargeOperation, insertTestExecution } from '../../../test/support/fixtures';
import { waitForLockWaiter } from '../../../test/support/lock-waits';
import { withSessions } from '../../../test/support/sessions';
import { useTestDatabase } from '../../../test/support/test-database';
import { lockRetried, setRetryOf } from './store';

/**
 * The retry intake (POST /v1/operations/{id}/retry) holds the operation it retries (lockRetried) and judges the rest of
 * the chain — the FAILED that operation was itself a retry of, and so on back — in the statement that writes the link
 * (setRetryOf). A refutation of such a FAILED (the provider's late 2xx, a read that shows the effect) is an update of
 * that row; judged from the statement's snapshot, one being written as the retry was made was not seen, and the retry
 * was answered 201 and linked to a chain already refuted — cancelled only later, at its send (retry_refuted).
 */
describe('the retry intake judges the chain it joins under the chain’s locks (real Postgres)', () => {
  const db = useTestDatabase('retryintake', ['acme']);

  it('waits for a refutation up the chain being written, then refuses to link the retry', async () => {
    // original FAILED ← retried (its retry, FAILED too) ← the new retry being made of `retried`.
    const original = chargeOperation({ key: 'original' });
    const retried = chargeOperation({ key: 'retried' });
    await insertTestExecution(db.dataSource.manager, 'acme', { operations: [original] });
    await insertTestExecution(db.dataSource.manager, 'acme', { operations: [retried] });
    await db.dataSource.query(`UPDATE operations SET status = 'FAILED', attempt = 1 WHERE id = ANY($1)`, [
      [original.id, retried.id],
    ]);
    await db.dataSource.query(`UPDATE operations SET retry_of = $2 WHERE id = $1`, [retried.id, original.id]);
    await withSessions(db.dataSource, ['refuter', 'intake'], async ({ refuter, intake }) => {
      // The provider's 2xx for the original comes back late: recorded, not committed yet.
      await refuter.startTransaction();
      await refuter.query(`UPDATE operations SET acknowledged_at = now() WHERE id = $1`, [original.id]);
      await intake.startTransaction();
      expect((await lockRetried(intake.manager, 'acme', retried.id))?.status).toBe('FAILED');
      const retry = chargeOperation({ key: 'retried' });
      await insertTestExecution(intake.manager, 'acme', { operations: [retry] });
      let answered = false;
      const linking = setRetryOf(intake.manager, 'acme', retry.id, retried.id).finally(() => (answered = true));
      linking.catch(() => undefined);
      // The link waits for the refutation (not slept on: its backend shows a lock wait), or is answered at once.
      await waitForLockWaiter(db.dataSource, { unless: () => answered });
      await refuter.commitTransaction();
      expect(await linking).toBe(false);
      await intake.rollbackTransaction();
    });
  });
});
