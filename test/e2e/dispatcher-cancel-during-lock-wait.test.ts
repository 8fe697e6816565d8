import { TENANT_POLICY_SQL } from '@verity/persistence';
import { lockWaiters, waitForLockWaiter } from '../support/lock-waits';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { Execution, events, expectLegalHistory, getExecution, settle, submit } from './dispatcher-helpers';

/** The SENT statement (a compare-and-set of the operation's row, TransitionService), as pg_stat_activity shows it. */
const SENT_STATEMENT = '%UPDATE operations op SET%';

/**
 * The statement that commits a dispatch's SENT share-locks the tenant's row when the operation holds no approval (the
 * send guard's `approval_policy_changed`: the policy it was judged against is still the tenant's), and waits for a
 * policy write that holds it, keeping the snapshot it took before. An execution cancelled through the API meanwhile is
 * not sent for: the cancel rewrites the PREPARED operation in its own transaction, and the statement, finding its row
 * rewritten when the wait ends, judges it again as committed (CANCELLED) and writes nothing. Run against the real API
 * and dispatcher, so a cancel that ended only the execution (or a send guard that waited before the row's
 * compare-and-set) is caught here, not only by the persistence spec's copy of the cancel.
 */
describe('a dispatch waiting for the tenant’s row while the API cancels its execution', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'cancellockwait' });
  });
  afterAll(async () => stack?.stop());

  it('sends nothing: the operation ends CANCELLED, never SENT, and the provider is not charged', async () => {
    const reference = unique('cancel-lock-wait');
    // The lock a policy write takes first (TENANT_POLICY_SQL.lockPolicy: FOR NO KEY UPDATE), held by a transaction of
    // the test's own. Not FOR UPDATE: that also conflicts with the key-share lock every insert of a row naming the
    // tenant takes (its foreign key), so the submission and the cancel's events would wait for it too. With the policy
    // write's lock the API's cancel needs nothing of the tenant's row: it answers while the dispatch still waits.
    const policyWrite = stack.db.dataSource.createQueryRunner();
    await policyWrite.connect();
    try {
      await policyWrite.startTransaction();
      const [{ pid }] = (await policyWrite.query('SELECT pg_backend_pid() AS pid')) as { pid: number }[];
      await policyWrite.query(TENANT_POLICY_SQL.lockPolicy, ['demo']);

      // One charge that needs no approval (it asks for none, the demo tenant has no approval rule): its SENT statement
      // share-locks the tenant's row to compare the policy, and waits here.
      const created = await submit(stack, [charge(reference)]);
      await waitForLockWaiter(stack.db.dataSource, { statementLike: SENT_STATEMENT, blockedBy: pid });
      const waiting = await getExecution(stack, created.id);
      expect(waiting.operations[0]).toMatchObject({ status: 'PREPARED', approval: null });

      const cancelled = await http<Execution>(stack.apiUrl, 'POST', `/v1/executions/${created.id}/cancel`, {
        key: DEMO.agent,
        body: { reason: 'changed my mind' },
      });
      expect(cancelled.status).toBe(200);
      expect(cancelled.body.status).toBe('cancelled');
      // The cancel committed while the SENT statement still waited for the row. Another advance of the execution (the
      // sweeper re-drives one that stays unsent, late on a loaded machine) may be waiting beside it: every one of them
      // must send nothing, which is what follows checks.
      expect(await lockWaiters(stack.db.dataSource, SENT_STATEMENT, pid)).toBeGreaterThanOrEqual(1);

      // The policy write ends, having changed nothing the send judges.
      await policyWrite.commitTransaction();

      // Until the dispatch has answered: refused by its statement (logged), or — had the cancel left the operation
      // PREPARED — sent.
      const operationId = cancelled.body.operations[0].id;
      const refusedLogged = () =>
        stack
          .logs('dispatcher')
          .split('\n')
          .some((line) => line.includes('dispatch refused by the send guard') && line.includes(operationId));
      await waitFor(
        async () =>
          refusedLogged() ||
          (await events(stack, created.id)).some((e) => e.operation_id === operationId && e.to_status === 'SENT'),
        (done) => done,
      );

      const log = await events(stack, created.id);
      expect(log.filter((e) => e.operation_id === operationId).map((e) => e.to_status)).toEqual(['CANCELLED']);
      expectLegalHistory(log);
      const done = await settle(stack, created.id);
      expect(done.status).toBe('cancelled');
      expect(done.operations[0]).toMatchObject({ status: 'CANCELLED', attempt: 0 });
      expect((await stack.effects()).charges[reference]).toBeUndefined();
    } finally {
      if (policyWrite.isTransactionActive) await policyWrite.rollbackTransaction();
      await policyWrite.release();
    }
  });
});
