import { chargeOperationsBefore } from '../../../../test/support/migration-steps';
import { useTestDatabase } from '../../../../test/support/test-database';
import { TransitionService } from '../transition.service';
import { EffectShownAfterFailed1764630000000 } from './1764630000000-effect-shown-after-failed';

/**
 * An operation resolved FAILED and then shown by a re-check's read, recorded before the read was kept on the row: after
 * the upgrade it reads as refuted (commit unknown, retry forbidden) like one recorded since, not as "no effect".
 */
describe('migration 1764630000000: a FAILED refuted before the upgrade is refuted on its row (real Postgres)', () => {
  const db = useTestDatabase('effect-shown-backfill', ['acme']);

  it('copies the newest read that showed the effect onto the row, and leaves other FAILED operations alone', async () => {
    const manager = db.dataSource.manager;
    // Back to the schema (and code) before this migration, with three operations resolved FAILED.
    const leftAs = `status = 'FAILED', attempt = 1, obligation = '{"owner":"ops"}'`;
    const before = await chargeOperationsBefore(db, EffectShownAfterFailed1764630000000, 'acme', 3, leftAs);
    const [refuted, plain, notShown] = before.operations;
    const transitions = new TransitionService();
    // What the re-check wrote then: only the event, no key on the row.
    const recheck = (op: { executionId: string; operationId: string }, result: string) =>
      transitions.annotate(manager, {
        executionId: op.executionId,
        operationId: op.operationId,
        whileStatus: 'FAILED' as never,
        type: 'operation.rechecked',
        data: { result, evidence: {}, after: 'FAILED' },
      });
    expect((await recheck(refuted, 'unreachable')).won).toBe(true);
    expect((await recheck(refuted, 'found')).won).toBe(true);
    expect((await recheck(notShown, 'not_found')).won).toBe(true);

    await before.upgrade();
    const obligationOf = async (id: string) =>
      (
        (await manager.query(`SELECT obligation FROM operations WHERE id = $1`, [id])) as {
          obligation: Record<string, unknown>;
        }[]
      )[0].obligation;
    expect(await obligationOf(refuted.operationId)).toEqual({
      owner: 'ops',
      effect_shown_after_failed: {
        result: 'found',
        at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      },
    });
    expect(await obligationOf(plain.operationId)).toEqual({ owner: 'ops' });
    expect(await obligationOf(notShown.operationId)).toEqual({ owner: 'ops' });
  });
});
