import { TransitionService, lockExecution, snapshotOf } from '@verity/persistence';
import {
  CANCEL_CAUSE_OF_ENDED_EXECUTION,
  ExecutionStatus,
  OperationStatus,
  executionFailure,
} from '@verity/status-model';
import type { QueryRunner } from 'typeorm';
import type { z } from 'zod';
import type { API_SCHEMAS } from '../../apps/api/src/schemas';
import { waitForLockWaiter } from '../support/lock-waits';
import { DEMO, Stack } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';

type Execution = z.infer<typeof API_SCHEMAS.Execution>;
type ExecutionList = z.infer<typeof API_SCHEMAS.ExecutionList>;

/**
 * An answer built from several reads shows one moment. Under READ COMMITTED each statement reads its own snapshot: a
 * cancel committed after a GET had read the execution and before it read the operations showed the execution still
 * `created` beside operations that cancel had ended (CANCELLED) — a state no one ever committed (the cancel ends both
 * in one transaction so that no one sees that). Each case makes the read of the operations wait on a lock this test
 * holds, in whose transaction the execution is cancelled as the API's cancel does it, and commits once the read waits.
 */
describe('reads of an execution and its operations see one snapshot', () => {
  let stack: Stack;
  beforeAll(async () => {
    // No workers: the execution stays `created` with its operation PREPARED until this test cancels it, and nothing but
    // the API and this test reads or locks the operations table.
    stack = await Stack.start({ label: 'apireadsnap', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  async function created(): Promise<string> {
    const res = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('snapshot'))]),
    });
    expect(res.status).toBe(201);
    return res.body.id;
  }

  /** Cancels the execution in `tx` as the API's cancel does (its operations, then the execution), uncommitted. */
  async function cancelIn(tx: QueryRunner, id: string): Promise<void> {
    const transitions = new TransitionService();
    const locked = await lockExecution(tx.manager, id, 'demo');
    const cause = CANCEL_CAUSE_OF_ENDED_EXECUTION[ExecutionStatus.CANCELLED];
    for (const op of locked!.operations) {
      await transitions.operation(tx.manager, {
        operation: snapshotOf(op),
        to: OperationStatus.CANCELLED,
        eventData: { cause, by: 'test', reason: 'read skew' },
      });
    }
    const failure = executionFailure('cancelled_by_caller', locked!.status, new Date(), undefined, locked!.operations);
    await transitions.execution(tx.manager, {
      executionId: id,
      from: locked!.status,
      to: ExecutionStatus.CANCELLED,
      patch: { failure: failure as unknown as Record<string, unknown> },
      eventData: { by: 'test', reason: 'read skew', failure },
    });
  }

  /**
   * Sends `read` while this test holds the operations table, cancels `id` in the lock's transaction, and commits once
   * `read` waits for its read of the operations (`waitingLike`): what `read` answered.
   */
  async function readAcrossCancel<T>(id: string, waitingLike: string, read: () => Promise<T>): Promise<T> {
    const lock = stack.db.dataSource.createQueryRunner();
    await lock.connect();
    try {
      await lock.startTransaction();
      await lock.query(`LOCK TABLE operations IN ACCESS EXCLUSIVE MODE`);
      await cancelIn(lock, id);
      let answered = false;
      const reading = read().finally(() => (answered = true));
      reading.catch(() => undefined);
      await waitForLockWaiter(stack.db.dataSource, { statementLike: waitingLike, unless: () => answered });
      await lock.commitTransaction();
      return await reading;
    } finally {
      if (lock.isTransactionActive) await lock.rollbackTransaction();
      await lock.release();
    }
  }

  /** The execution's status beside its operations': before the cancel, or after it — never half of it. */
  function expectOneMoment(execution: Execution): void {
    const shown = { status: execution.status, operations: execution.operations.map((op) => op.status) };
    if (execution.status === 'cancelled') expect(shown).toEqual({ status: 'cancelled', operations: ['CANCELLED'] });
    else expect(shown).toEqual({ status: 'created', operations: ['PREPARED'] });
  }

  it('GET /v1/executions/{id} never shows the execution running beside operations its cancel ended', async () => {
    const id = await created();
    const res = await readAcrossCancel(id, '%FROM operations t%WHERE t.execution_id = $1 AND%', () =>
      http<Execution>(stack.apiUrl, 'GET', `/v1/executions/${id}`, { key: DEMO.agent }),
    );
    expect(res.status).toBe(200);
    expectOneMoment(res.body);
    // The cancel was committed: the next read shows it whole.
    const after = await http<Execution>(stack.apiUrl, 'GET', `/v1/executions/${id}`, { key: DEMO.agent });
    expect(after.body.status).toBe('cancelled');
    expectOneMoment(after.body);
  }, 60_000);

  it('GET /v1/executions never shows an execution running beside operations its cancel ended', async () => {
    const id = await created();
    const res = await readAcrossCancel(id, '%FROM operations t%WHERE t.execution_id = ANY($1)%', () =>
      http<ExecutionList>(stack.apiUrl, 'GET', `/v1/executions?limit=1`, { key: DEMO.agent }),
    );
    expect(res.status).toBe(200);
    expect(res.body.data.map((e) => e.id)).toEqual([id]);
    expectOneMoment(res.body.data[0]);
  }, 60_000);
});
