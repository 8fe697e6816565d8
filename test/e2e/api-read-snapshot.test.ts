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
import { charge, http, sms, submission, unique } from '../support/http';
import { type Op, submit, waitForOp } from './dispatcher-helpers';

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

  /** Cancels the execution in `tx` as the API's cancel does (its PREPARED operations, the execution, its never-sent holds), uncommitted. */
  async function cancelIn(tx: QueryRunner, id: string): Promise<void> {
    const transitions = new TransitionService();
    const locked = await lockExecution(tx.manager, id, 'demo');
    const cause = CANCEL_CAUSE_OF_ENDED_EXECUTION[ExecutionStatus.CANCELLED];
    for (const op of locked!.operations) {
      if (op.status !== OperationStatus.PREPARED) continue;
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
    // A hold never sent ends with its execution (after the execution's move, which its statement checks).
    await transitions.cancelHeldOfEndedExecution(tx.manager, locked!.operations.map(snapshotOf), {
      cause,
      by: 'test',
      reason: 'read skew',
    });
  }

  /**
   * Sends `read` while this test holds `table` (the operations unless told), cancels `id` in the lock's transaction, and
   * commits once `read` waits for its read of that table (`waitingLike`): what `read` answered.
   */
  async function readAcrossCancel<T>(
    id: string,
    waitingLike: string,
    read: () => Promise<T>,
    table: 'operations' | 'events' = 'operations',
  ): Promise<T> {
    const lock = stack.db.dataSource.createQueryRunner();
    await lock.connect();
    try {
      await lock.startTransaction();
      await lock.query(`LOCK TABLE ${table} IN ACCESS EXCLUSIVE MODE`);
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

  /**
   * The execution's status beside its operations' as they were before the cancel: the snapshot is taken by the first
   * read (of the execution, which this test does not lock), before the cancel commits — never half of it, nor after it.
   */
  function expectBeforeCancel(execution: Execution): void {
    const shown = { status: execution.status, operations: execution.operations.map((op) => op.status) };
    expect(shown).toEqual({ status: 'created', operations: ['PREPARED'] });
  }

  /** After the cancel committed: the execution and its operations ended by it. */
  function expectCancelled(execution: Execution): void {
    const shown = { status: execution.status, operations: execution.operations.map((op) => op.status) };
    expect(shown).toEqual({ status: 'cancelled', operations: ['CANCELLED'] });
  }

  /** The API's reads that these tests make wait (tenant_id: not the workers' statements of the same tables). */
  /**
   * The first read of the operations by an execution's read and a list's: how much stored text the executions hold (a
   * page's size bound, the answer budget).
   */
  const TEXT_OF_EXECUTIONS = '%sum(octet_length(o::text))%FROM operations o%';
  const LAST_STATUS_CHANGES = '%FROM events WHERE operation_id = ANY($1) AND tenant_id = $2 AND type = %';
  const EXECUTION_BY_ID = '%FROM executions t WHERE t.id = $1 AND t.tenant_id = $2%';

  it('GET /v1/executions/{id} never shows the execution running beside operations its cancel ended', async () => {
    const id = await created();
    // Its first read (of the execution) sizes its operations' stored text (the answer budget): it waits there.
    const res = await readAcrossCancel(id, TEXT_OF_EXECUTIONS, () =>
      http<Execution>(stack.apiUrl, 'GET', `/v1/executions/${id}`, { key: DEMO.agent }),
    );
    expect(res.status).toBe(200);
    expectBeforeCancel(res.body);
    // The cancel was committed: the next read shows it whole.
    const after = await http<Execution>(stack.apiUrl, 'GET', `/v1/executions/${id}`, { key: DEMO.agent });
    expectCancelled(after.body);
  }, 60_000);

  it('GET /v1/executions never shows an execution running beside operations its cancel ended', async () => {
    const id = await created();
    const res = await readAcrossCancel(id, TEXT_OF_EXECUTIONS, () =>
      http<ExecutionList>(stack.apiUrl, 'GET', `/v1/executions?limit=1`, { key: DEMO.agent }),
    );
    expect(res.status).toBe(200);
    expect(res.body.data.map((e) => e.id)).toEqual([id]);
    expectBeforeCancel(res.body.data[0]);
  }, 60_000);

  describe('a hold never sent, whose execution is cancelled while it is read', () => {
    /**
     * A charge held before it was ever sent (a knowledge conflict), with a message depending on it that keeps its
     * execution running; a dispatcher is started to hold it and stopped once it did, so nothing else moves anything.
     */
    async function heldNeverSent(): Promise<{ executionId: string; held: Op }> {
      await stack.startApp('dispatcher');
      const created = await submit(stack, [
        charge(unique('snapshot-held'), { expected_state: { charged: true } }),
        sms(unique('snapshot-held-sms'), { depends_on: ['charge'] }),
      ]);
      const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
      for (const app of stack.running('dispatcher')) await stack.kill(app, 'SIGTERM');
      return { executionId: created.id, held };
    }

    /**
     * The hold exactly as it was shown before the cancel (`before`): the snapshot is taken by the read of the operation,
     * before the cancel commits — never the hold judged from after it, nor ended by it.
     */
    function expectHoldBeforeCancel(
      shown: { status: string; failure: unknown; resolution_options?: unknown },
      before: { status: string; failure: unknown; resolution_options?: unknown },
    ): void {
      expect({ status: shown.status, failure: shown.failure }).toEqual({
        status: before.status,
        failure: before.failure,
      });
      if (shown.resolution_options !== undefined) expect(shown.resolution_options).toEqual(before.resolution_options);
    }

    it('GET /v1/operations/{id} never shows it held with its last move and options from after the cancel', async () => {
      const { executionId, held } = await heldNeverSent();
      const before = await http<Op>(stack.apiUrl, 'GET', `/v1/operations/${held.id}`, { key: DEMO.reviewer });
      expect(before.body.status).toBe('MANUAL_REVIEW');
      expect(before.body.permitted_resolutions).toContain('SENT');
      const res = await readAcrossCancel(
        executionId,
        LAST_STATUS_CHANGES,
        () => http<Op>(stack.apiUrl, 'GET', `/v1/operations/${held.id}`, { key: DEMO.reviewer }),
        'events',
      );
      expect(res.status).toBe(200);
      expectHoldBeforeCancel(res.body, before.body);
      const after = await http<Op>(stack.apiUrl, 'GET', `/v1/operations/${held.id}`, { key: DEMO.reviewer });
      expect(after.body.status).toBe('CANCELLED');
    }, 90_000);

    it('the review queue never shows it held with its last move from after the cancel', async () => {
      const { executionId, held } = await heldNeverSent();
      type Queue = { data: { operation: Op; execution: { status: string } }[] };
      const queue = () =>
        http<Queue>(stack.apiUrl, 'GET', `/v1/review/manual-reviews?q=${executionId}`, { key: DEMO.reviewer });
      const before = await queue();
      expect(before.body.data.map((item) => item.operation.id)).toEqual([held.id]);
      const res = await readAcrossCancel(executionId, LAST_STATUS_CHANGES, queue, 'events');
      expect(res.status).toBe(200);
      expect(res.body.data).toHaveLength(1);
      expectHoldBeforeCancel(res.body.data[0].operation, before.body.data[0].operation);
      expect(res.body.data[0].execution.status).toBe(before.body.data[0].execution.status);
    }, 90_000);

    it('a release that lost its compare-and-set is refused on one snapshot, not beside a cancel committed meanwhile', async () => {
      const { executionId, held } = await heldNeverSent();
      const before = await http<Op>(stack.apiUrl, 'GET', `/v1/operations/${held.id}`, { key: DEMO.reviewer });
      expect(before.body.permitted_resolutions).toContain('SENT');
      // A: another reviewer's "still unknown", uncommitted: the release's statement waits on its row, then loses to it.
      const stillUnknown = stack.db.dataSource.createQueryRunner();
      // B: the execution's cancel, under a lock of the executions table the refusal's read of the execution waits on.
      const cancel = stack.db.dataSource.createQueryRunner();
      await stillUnknown.connect();
      await cancel.connect();
      try {
        await stillUnknown.startTransaction();
        const at = '2026-01-01T00:00:00.000Z';
        await stillUnknown.query(
          `UPDATE operations SET obligation = jsonb_set(obligation, '{investigations}',
             coalesce(obligation->'investigations', '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
               'evidence', 'still unknown', 'by', 'key_other_reviewer', 'at', $2::text,
               'previous_due_at', obligation->'due_at', 'due_at', $2::text)))
           WHERE id = $1`,
          [held.id, at],
        );
        let answered = false;
        const releasing = http<{ type: string; detail: string; current_status: string; decision?: string }>(
          stack.apiUrl,
          'POST',
          `/v1/operations/${held.id}/resolve`,
          { key: DEMO.reviewer, body: { status: 'SENT', evidence: 'the conflict is understood; send it' } },
        ).finally(() => (answered = true));
        releasing.catch(() => undefined);
        // The release's statement (it records the resolution) waits on the row A changed.
        await waitForLockWaiter(stack.db.dataSource, {
          // updated_at is the statement's clock reading after its row locks (its `stamp`), whatever its spelling.
          statementLike: `%UPDATE operations SET updated_at = %, obligation = jsonb_set(coalesce(obligation%`,
        });
        await cancel.startTransaction();
        // Queued behind the release's statement (it names the executions table), taken once that statement is done.
        let lockTaken = false;
        const locked = cancel.query(`LOCK TABLE executions IN ACCESS EXCLUSIVE MODE`).then(() => (lockTaken = true));
        await waitForLockWaiter(stack.db.dataSource, {
          statementLike: 'LOCK TABLE executions%',
          unless: () => lockTaken,
        });
        await stillUnknown.commitTransaction();
        await locked;
        await cancelIn(cancel, executionId);
        // The refusal has read the operation (still held: the cancel is not committed) and waits to read its execution.
        await waitForLockWaiter(stack.db.dataSource, { statementLike: EXECUTION_BY_ID, unless: () => answered });
        await cancel.commitTransaction();
        const res = await releasing;
        // Answered as of one moment, before the cancel: the "still unknown" recorded first won (I13) — not "SENT is
        // not permitted: its execution ended" beside a hold shown still MANUAL_REVIEW.
        expect(res.status).toBe(409);
        expect(res.body).toMatchObject({
          type: expect.stringContaining('already-decided'),
          decision: 'MANUAL_REVIEW',
          current_status: 'MANUAL_REVIEW',
        });
        const after = await http<Op>(stack.apiUrl, 'GET', `/v1/operations/${held.id}`, { key: DEMO.reviewer });
        expect(after.body.status).toBe('CANCELLED');
      } finally {
        for (const runner of [stillUnknown, cancel]) {
          if (runner.isTransactionActive) await runner.rollbackTransaction();
          await runner.release();
        }
      }
    }, 90_000);
  });
});
