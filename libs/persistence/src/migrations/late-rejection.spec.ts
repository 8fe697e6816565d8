import { chargeOperationsBefore } from '../../../../test/support/migration-steps';
import { useTestDatabase } from '../../../../test/support/test-database';
import { TransitionService } from '../transition.service';
import { LateRejection1764650000000 } from './1764650000000-late-rejection';

/**
 * A late rejection recorded before it was kept on the row (only its `operation.rejected_late` event): after the upgrade
 * the operation has it on file like one recorded since, so a person's VERIFIED of the hold is refused.
 */
describe('migration 1764650000000: a late rejection recorded before the upgrade is on its row (real Postgres)', () => {
  const db = useTestDatabase('late-rejection-backfill', ['acme']);

  it('copies the rejection event onto the row, and leaves operations without one alone', async () => {
    const transitions = new TransitionService();
    const manager = db.dataSource.manager;
    // Back to the schema (and code) before this migration, with two operations held for review.
    const leftAs = `status = 'MANUAL_REVIEW', attempt = 1, terminal_reason = 'CONNECTOR_ERROR'`;
    const before = await chargeOperationsBefore(db, LateRejection1764650000000, 'acme', 2, leftAs);
    const [rejected, plain] = before.operations;
    // What the dispatcher wrote then: only the event, nothing on the row.
    const late = {
      detail: 'provider rejected the request (402)',
      reason: 'CONNECTOR_REJECTED',
      provider_error: { code: 'card_declined' },
    };
    expect(
      (
        await transitions.annotate(manager, {
          executionId: rejected.executionId,
          operationId: rejected.operationId,
          whileStatus: ['MANUAL_REVIEW' as never],
          type: 'operation.rejected_late',
          data: late,
        })
      ).won,
    ).toBe(true);
    // Another operation's annotation is not a rejection.
    await transitions.annotate(manager, {
      executionId: plain.executionId,
      operationId: plain.operationId,
      whileStatus: ['MANUAL_REVIEW' as never],
      type: 'operation.rechecked',
      data: { result: 'unreachable' },
    });
    const [event] = (await manager.query(
      `SELECT created_at FROM events WHERE operation_id = $1 AND type = 'operation.rejected_late'`,
      [rejected.operationId],
    )) as { created_at: Date }[];

    await before.upgrade();
    const rowOf = async (id: string) =>
      (
        (await manager.query(`SELECT rejected_at, rejection FROM operations WHERE id = $1`, [id])) as {
          rejected_at: Date | null;
          rejection: unknown;
        }[]
      )[0];
    expect(await rowOf(rejected.operationId)).toEqual({ rejected_at: event.created_at, rejection: late });
    expect(await rowOf(plain.operationId)).toEqual({ rejected_at: null, rejection: null });
  });
});
