import { insertChargeExecution } from '../../../test/support/fixtures';
import { waitForLockWaiter } from '../../../test/support/lock-waits';
import { useTestDatabase } from '../../../test/support/test-database';
import { claimRecheckRequest, recordRecheckRequest } from './recheck-requests';

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
    const api = db.dataSource.createQueryRunner();
    await api.connect();
    try {
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
    } finally {
      if (api.isTransactionActive) await api.rollbackTransaction();
      await api.release();
    }
  });
});
