import { insertChargeExecution } from '../../../test/support/fixtures';
import { useTestDatabase } from '../../../test/support/test-database';
import { postponeRecheck, recordApprovalBaseline } from './checks.repository';

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

describe('postponeRecheck (real Postgres)', () => {
  const db = useTestDatabase('postponerecheck', ['acme']);

  /** A hold whose automatic re-check was due an hour ago, at a time with microseconds (as the database stamps it). */
  async function overdueHold(): Promise<{ operationId: string; due: Date }> {
    const { operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    await db.dataSource.query(
      `UPDATE operations SET status = 'MANUAL_REVIEW', attempt = 1,
              next_check_at = now() - interval '1 hour' + interval '123 microseconds'
       WHERE id = $1`,
      [operationId],
    );
    const [{ due }] = (await db.dataSource.query(`SELECT next_check_at AS due FROM operations WHERE id = $1`, [
      operationId,
    ])) as { due: Date }[];
    return { operationId, due };
  }

  const scheduleOf = async (operationId: string) =>
    (
      (await db.dataSource.query(
        `SELECT status, next_check_at, next_check_at - clock_timestamp() > interval '50 seconds' AS later, updated_at
         FROM operations WHERE id = $1`,
        [operationId],
      )) as { status: string; next_check_at: Date | null; later: boolean | null; updated_at: Date }[]
    )[0];

  it('moves the due time it ran for on, from the database’s now, and leaves updated_at as it was', async () => {
    const { operationId, due } = await overdueHold();
    const before = await scheduleOf(operationId);
    expect(await postponeRecheck(db.dataSource.manager, operationId, due, 60_000)).toBe(true);
    const after = await scheduleOf(operationId);
    expect(after.later).toBe(true);
    expect(after.updated_at).toEqual(before.updated_at);
  });

  it('writes nothing once the hold names another due time (re-dated by a read meanwhile) or is held no more', async () => {
    const { operationId, due } = await overdueHold();
    const redated = new Date(Date.now() + 5_000);
    await db.dataSource.query(`UPDATE operations SET next_check_at = $2 WHERE id = $1`, [operationId, redated]);
    expect(await postponeRecheck(db.dataSource.manager, operationId, due, 60_000)).toBe(false);
    expect((await scheduleOf(operationId)).next_check_at).toEqual(redated);

    const verified = await overdueHold();
    // A VERIFIED operation's next_check_at is its next observation: never a re-check's to move.
    await db.dataSource.query(`UPDATE operations SET status = 'VERIFIED' WHERE id = $1`, [verified.operationId]);
    expect(await postponeRecheck(db.dataSource.manager, verified.operationId, verified.due, 60_000)).toBe(false);
    expect((await scheduleOf(verified.operationId)).later).toBe(false);
  });
});
