import { insertChargeExecution } from '../../../test/support/fixtures';
import { useTestDatabase } from '../../../test/support/test-database';
import { recordApprovalBaseline } from './checks.repository';

describe('recordApprovalBaseline (real Postgres)', () => {
  const db = useTestDatabase('approvalbaseline', ['acme']);

  const approvalOf = async (operationId: string) =>
    (
      (await db.dataSource.query(`SELECT approval FROM operations WHERE id = $1`, [operationId])) as {
        approval: Record<string, unknown> | null;
      }[]
    )[0].approval;

  it('merges the baseline into a PREPARED operation’s approval, keeping a decision that arrived early', async () => {
    const { operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    await db.dataSource.query(`UPDATE operations SET approval = '{"state":"granted"}'::jsonb WHERE id = $1`, [
      operationId,
    ]);
    await recordApprovalBaseline(db.dataSource.manager, operationId, { balance: 10 });
    expect(await approvalOf(operationId)).toEqual({ state: 'granted', baseline: { balance: 10 } });
  });

  it('writes nothing on an operation that left PREPARED since its read (sent or cancelled meanwhile)', async () => {
    const { operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    await db.dataSource.query(
      `UPDATE operations SET status = 'CANCELLED', approval = '{"state":"denied"}'::jsonb WHERE id = $1`,
      [operationId],
    );
    await recordApprovalBaseline(db.dataSource.manager, operationId, { balance: 10 });
    expect(await approvalOf(operationId)).toEqual({ state: 'denied' });
  });
});
