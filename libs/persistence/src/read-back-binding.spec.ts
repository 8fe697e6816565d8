import { ExecutionStatus, OperationStatus, VerificationMethod } from '@verity/status-model';
import { EntityManager, QueryRunner } from 'typeorm';
import { chargeOperation, insertChargeExecution, insertTestExecution } from '../../../test/support/fixtures';
import { lockReadBackBindings, lockSpendingCaps } from './entities';
import { withSessions } from '../../../test/support/sessions';
import { useTestDatabase } from '../../../test/support/test-database';
import { loadConnectorSettings } from './entities/connector-settings.entity';
import { changeConnectorSettings, upsertConnectorSettings } from './connector-settings.repository';
import { waitForLockWaiter, writeWhileRowHeld } from '../../../test/support/lock-waits';
import { insertStandingKeys } from '../../../test/support/fixtures';
import { preparedSnapshot, sentFromPrepared } from '../../../test/support/sends';
import { TransitionService } from './transition.service';
import { lockExecutionForWorker } from './store';

/**
 * An operation read back through a read-back that does not name its effect was read under the settings as they were
 * read before it; if the tenant's admin bound read-backs in between (`read_back_binding: "bound"`), the statement that
 * would write VERIFIED must refuse, whatever the worker read (docs/decisions.md, "Bound read-backs").
 */
describe('VERIFIED from an unbound read-back (readBackUnbound) checks the tenant binding in its statement (real Postgres)', () => {
  const db = useTestDatabase('rbbinding', ['acme']);
  const transitions = new TransitionService();

  /** One operation ACKNOWLEDGED (attempt 1) in a running execution, as the sender leaves it. */
  async function acknowledged() {
    const ids = await insertChargeExecution(db.dataSource.manager, 'acme', {
      operation: { params: { amount: 100, currency: 'EUR', reference: `r-${Math.random()}` } },
    });
    await db.dataSource.query(`UPDATE executions SET status = 'running' WHERE id = $1`, [ids.executionId]);
    await db.dataSource.query(`UPDATE operations SET status = 'ACKNOWLEDGED', attempt = 1 WHERE id = $1`, [
      ids.operationId,
    ]);
    return ids;
  }
  const verify = (operationId: string, readBackUnbound?: boolean) =>
    transitions.operation(db.dataSource.manager, {
      operation: {
        id: operationId,
        status: OperationStatus.ACKNOWLEDGED,
        attempt: 1,
        verificationMethod: VerificationMethod.READ_AFTER_WRITE,
      },
      to: OperationStatus.VERIFIED,
      readBackUnbound,
      patch: { evidence: { method: 'read_after_write' } },
    });
  const statusIn = async (on: EntityManager, id: string) =>
    ((await on.query(`SELECT status FROM operations WHERE id = $1`, [id])) as { status: string }[])[0].status;
  const statusOf = (id: string) => statusIn(db.dataSource.manager, id);
  const bind = (binding: 'declared' | 'bound') =>
    upsertConnectorSettings(db.dataSource.manager, 'acme', 'sandbox.payments', { readBackBinding: binding, by: 't' });

  it('stores the binding: "declared" without a row, the value set, kept by a write that leaves it out', async () => {
    const read = () => loadConnectorSettings(db.dataSource.manager, 'acme', 'sandbox.payments', { withSecrets: false });
    expect((await read()).readBackBinding).toBe('declared');
    await bind('bound');
    expect((await read()).readBackBinding).toBe('bound');
    await upsertConnectorSettings(db.dataSource.manager, 'acme', 'sandbox.payments', { allowHosts: [], by: 't' });
    expect((await read()).readBackBinding).toBe('bound');
    await expect(
      db.dataSource.query(`UPDATE tenant_connector_settings SET read_back_binding = 'strict' WHERE tenant_id = 'acme'`),
    ).rejects.toThrow(/read_back_binding/);
    await bind('declared');
  });

  it('declared (or no row): VERIFIED is written', async () => {
    const { operationId } = await acknowledged();
    expect(await verify(operationId, true)).toMatchObject({ won: true });
    expect(await statusOf(operationId)).toBe('VERIFIED');
  });

  it('bound: VERIFIED from an unbound read-back is refused, nothing written; a bound one is written', async () => {
    await bind('bound');
    const unbound = await acknowledged();
    expect(await verify(unbound.operationId, true)).toEqual({ won: false });
    expect(await statusOf(unbound.operationId)).toBe('ACKNOWLEDGED');
    const events = (await db.dataSource.query(`SELECT count(*) AS n FROM events WHERE operation_id = $1`, [
      unbound.operationId,
    ])) as { n: string }[];
    expect(events[0].n).toBe('0');

    const boundRead = await acknowledged();
    expect(await verify(boundRead.operationId)).toMatchObject({ won: true });
    expect(await statusOf(boundRead.operationId)).toBe('VERIFIED');
    await bind('declared');
  });

  it('a VERIFIED whose statement began before an admin bound read-backs never commits after the bind', async () => {
    // The statement reads the binding as it starts, then waits for the operation's row (another writer holds it: a
    // reviewer's decision, a re-check asked for at a version). Meanwhile an admin binds read-backs (PUT, as
    // ConnectorSettingsService.put writes it) and is answered. Judged from the statement's snapshot, the VERIFIED was then
    // committed after the bind, through the read-back the tenant had just said does not count.
    await insertStandingKeys(db.dataSource.manager, 'acme', ['key_admin']);
    const { operationId } = await acknowledged();
    try {
      const { written: result, statusSeenByChange } = await writeWhileRowHeld(
        db.dataSource,
        operationId,
        () => verify(operationId, true),
        (tx) =>
          changeConnectorSettings(tx, { tenantId: 'acme', connector: 'sandbox.payments', by: 'key_admin' }, () =>
            upsertConnectorSettings(tx, 'acme', 'sandbox.payments', { readBackBinding: 'bound', by: 'key_admin' }),
          ),
      );
      // Whether the VERIFIED had committed when the bind was made, as the bind's own transaction sees it.
      const bindSawVerified = statusSeenByChange === OperationStatus.VERIFIED;
      // Written, it was written before the bind committed; otherwise it was refused.
      if (result.won) expect(bindSawVerified).toBe(true);
      else expect(await statusOf(operationId)).toBe('ACKNOWLEDGED');
    } finally {
      await bind('declared');
    }
  });

  it('only goes with a move to VERIFIED', async () => {
    await expect(
      transitions.operation(db.dataSource.manager, {
        operation: {
          id: 'op_x',
          status: OperationStatus.ACKNOWLEDGED,
          attempt: 1,
          verificationMethod: VerificationMethod.READ_AFTER_WRITE,
        },
        to: OperationStatus.UNKNOWN,
        readBackUnbound: true,
      }),
    ).rejects.toThrow(/readBackUnbound/);
  });
});

/**
 * The lock order every writer keeps: a connector's spending-caps lock (727002), then rows. A capped send takes it
 * exclusively, then its operation's row and its execution's (the SENT statement bumps the execution's event_seq). A
 * VERIFIED from an unbound read-back (verity_read_backs_bound_locked) and the prepare's moves judged under the settings
 * (verity_settings_version_locked) take it shared; written in a transaction that already held the execution's rows (a
 * knowledge.conflict recorded first, as the dispatcher's owed precondition re-read writes it; the prepare's locked
 * operations and execution), they waited for the send, which waited for those rows: Postgres aborted one side
 * (40P01). The transactions here are not retried, so such an abort fails the test; each was seen failing without
 * lockReadBackBindings, which takes the lock shared before any row.
 */
describe('statements judged under the cap lock (shared) after row locks, beside a capped send (real Postgres)', () => {
  const db = useTestDatabase('rblockorder', ['acme']);
  const transitions = new TransitionService();

  /** A send of the PREPARED `operationId` under the cap, in `sender`'s transaction: the cap's turn, then the SENT statement. */
  async function cappedSend(sender: QueryRunner, operationId: string) {
    await sender.startTransaction();
    await lockSpendingCaps(sender.manager, 'acme', 'sandbox.payments');
    const sent = await sentFromPrepared(
      transitions,
      sender.manager,
      operationId,
      { kind: 'dispatch', approvalRequired: false },
      { sent_at: 'now' },
    );
    await sender.commitTransaction();
    return sent;
  }

  it('an owed re-read’s knowledge.conflict then VERIFIED (turn first, then rows) meets a capped send of the same execution without a deadlock', async () => {
    // One running execution: A is sent under a cap; B's owed precondition re-read found the state already present
    // against what the agent expected (knowledge.conflict, then VERIFIED with no_change_required).
    const a = chargeOperation({ key: 'a' });
    const b = chargeOperation({ key: 'b', position: 1 });
    const executionId = await insertTestExecution(db.dataSource.manager, 'acme', { operations: [a, b] });
    await db.dataSource.query(`UPDATE executions SET status = 'running' WHERE id = $1`, [executionId]);
    await withSessions(db.dataSource, ['worker', 'sender'], async ({ worker, sender }) => {
      await worker.startTransaction();
      // What the dispatcher takes before any row of a transaction that may write such a VERIFIED.
      await lockReadBackBindings(worker.manager, 'acme', ['sandbox.payments']);
      const conflict = await transitions.annotate(worker.manager, {
        executionId,
        operationId: b.id,
        whileStatus: OperationStatus.PREPARED,
        type: 'knowledge.conflict',
        data: { no_change_required: true },
      });
      expect(conflict.won).toBe(true);
      // The capped send as commitWithinSpendingCaps orders it (the cap's turn, then the SENT statement's rows), in a
      // transaction of its own that is not retried: a deadlock Postgres resolves by aborting one side shows here.
      let sendSettled = false;
      const sending = cappedSend(sender, a.id).finally(() => (sendSettled = true));
      sending.catch(() => undefined);
      // The send waits (for the cap lock, or for the execution's row): either way it now holds what it took first.
      await waitForLockWaiter(db.dataSource, { unless: () => sendSettled });
      const verified = await transitions.operation(worker.manager, {
        operation: preparedSnapshot(b.id),
        to: OperationStatus.VERIFIED,
        patch: { no_change_required: true, evidence: { method: 'context_read', no_change_required: true } },
        eventData: { no_change_required: true },
        readBackUnbound: true,
      });
      await worker.commitTransaction();
      expect(verified.won).toBe(true);
      expect(await sending).toMatchObject({ won: true });
    });
  });

  it('the prepare’s moves judged under the settings (whileSettingsAt), after its row locks, beside a capped send of the same execution', async () => {
    // The dispatcher's preparation locks the execution's operations and the execution (lockExecutionForWorker), then
    // writes the moves out of resolving_context only while the settings its context reads were made under are stored
    // (verity_settings_version_locked: the cap's lock, shared). A send of one of its operations (a job that read the
    // execution running, or any capped SENT statement reaching these rows) holds the cap's lock and waits for a row:
    // the statement queues for the locked rows before its guard refuses it.
    const b = chargeOperation({ key: 'b' });
    const a = chargeOperation({ key: 'a', position: 1, depends_on: ['b'] });
    const executionId = await insertTestExecution(db.dataSource.manager, 'acme', { operations: [b, a] });
    await db.dataSource.query(`UPDATE executions SET status = 'resolving_context' WHERE id = $1`, [executionId]);
    await withSessions(db.dataSource, ['worker', 'sender'], async ({ worker, sender }) => {
      await worker.startTransaction();
      // What the dispatcher takes before any row: the lock of each connector read for context.
      await lockReadBackBindings(worker.manager, 'acme', ['sandbox.payments']);
      expect((await lockExecutionForWorker(worker.manager, executionId))?.status).toBe('resolving_context');
      let sendSettled = false;
      const sending = cappedSend(sender, a.id).finally(() => (sendSettled = true));
      sending.catch(() => undefined);
      await waitForLockWaiter(db.dataSource, { unless: () => sendSettled });
      const moved = await transitions.executionMoves(worker.manager, {
        executionId,
        from: ExecutionStatus.RESOLVING_CONTEXT,
        moves: [{ to: ExecutionStatus.PLANNING }, { to: ExecutionStatus.RUNNING }],
        whileSettingsAt: [{ connector: 'sandbox.payments', version: null }],
      });
      await worker.commitTransaction();
      expect(moved.won).toBe(true);
      // Refused or sent, but answered: not aborted by a deadlock.
      await expect(sending).resolves.toHaveProperty('won');
    });
  });
});
