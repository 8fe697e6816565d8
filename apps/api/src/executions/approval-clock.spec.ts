import { OperationStatus } from '@verity/status-model';
import { observedQueryable } from '../../../../test/support/observed-queryable';
import { useTestDatabase } from '../../../../test/support/test-database';
import { databaseNowForApprovals } from './approval-clock';

describe('databaseNowForApprovals', () => {
  const db = useTestDatabase('approval-clock');

  it('is no earlier than the database’s clock when it answered, however long its answer took to come back', async () => {
    // The time the read took is not taken off the database's clock: else a deadline passed by then shows `requested`.
    const slow = observedQueryable(db.dataSource.manager, 200);
    const now = await databaseNowForApprovals(slow.queryable, [
      { status: OperationStatus.PREPARED, approval: { state: 'requested' } },
    ]);
    expect(slow.seen).toHaveLength(1);
    const [answered] = slow.seen[0].answer as { now: string | Date }[];
    expect(now!.getTime()).toBeGreaterThanOrEqual(new Date(answered.now).getTime());
  });

  it('reads nothing where no approval request waits', async () => {
    const observed = observedQueryable(db.dataSource.manager);
    const now = await databaseNowForApprovals(observed.queryable, [
      { status: OperationStatus.PREPARED, approval: { state: 'granted' } },
      { status: OperationStatus.MANUAL_REVIEW, approval: { state: 'requested' } },
    ]);
    expect(now).toBeUndefined();
    expect(observed.seen).toEqual([]);
  });
});
