import { TransitionService, lockExecutionForWorker, snapshotOf, transaction } from '@verity/persistence';
import { ExecutionStatus, OperationStatus, executionFailure } from '@verity/status-model';
import { DEMO, Stack } from '../support/stack';
import { charge, http, sms, unique } from '../support/http';
import {
  Event,
  Op,
  events,
  expectLegalHistory,
  getExecution,
  getOperation,
  logLines,
  resetSandbox,
  settle,
  statusPath,
  submit,
  waitForOp,
} from './dispatcher-helpers';

type End = ExecutionStatus.CANCELLED | ExecutionStatus.EXPIRED | ExecutionStatus.FAILED;

/** The failure each end records on the execution, as the cancel, the expiry and a rejection write it. */
const END_FAILURE = {
  [ExecutionStatus.CANCELLED]: 'cancelled_by_caller',
  [ExecutionStatus.EXPIRED]: 'deadline_exceeded',
  [ExecutionStatus.FAILED]: 'invalid_request',
} as const;

/**
 * A held operation that was never sent can no longer be released once its execution has ended unreleasable; the cancel
 * and the expiry end it with the execution. Rows left behind by a path that did not (versions from before they did,
 * an execution ended otherwise) are the sweeper's: it ends each CANCELLED, once, by the cancel's own statement — and
 * leaves alone a hold that was ever sent, and one whose execution runs or completed (a release may still be carried
 * out there).
 */
describe('reconciler: held, never-sent operations left behind by an ended execution', () => {
  let stack: Stack;
  const transitions = new TransitionService();
  beforeAll(async () => {
    stack = await Stack.start({ label: 'endedholds' });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => resetSandbox(stack));

  /**
   * Ends the execution as the cancel and the expiry did before they cancelled its held, never-sent operations: its
   * PREPARED operations cancelled, the execution moved to `end`, each with its event, in one transaction over the
   * locked rows — and the held operation left in MANUAL_REVIEW.
   */
  async function endAsBefore(executionId: string, end: End, cause: string): Promise<void> {
    await transaction(stack.db.dataSource, async (tx) => {
      const locked = await lockExecutionForWorker(tx, executionId);
      if (!locked) throw new Error(`no execution ${executionId}`);
      for (const op of locked.operations) {
        if (op.status !== OperationStatus.PREPARED) continue;
        const moved = await transitions.operation(tx, {
          operation: snapshotOf(op),
          to: OperationStatus.CANCELLED,
          eventData: { cause },
        });
        if (!moved.won) throw new Error(`lost the cancel of ${op.id}`);
      }
      const failure = executionFailure(END_FAILURE[end], locked.status, new Date());
      const moved = await transitions.execution(tx, {
        executionId,
        from: locked.status,
        to: end,
        patch: { failure: failure as unknown as Record<string, unknown> },
        eventData: { failure },
      });
      if (!moved.won) throw new Error(`lost the move of ${executionId} to ${end}`);
    });
  }

  /** One charge waits for an approval (the execution stays open), the other is held for a conflict, never sent. */
  async function heldBesideAWait(label: string): Promise<{ executionId: string; held: Op; refs: string[] }> {
    const refs = [unique(`${label}-waiting`), unique(`${label}-held`)];
    const created = await submit(stack, [
      charge(refs[0], { requires_approval: true }),
      charge(refs[1], { key: 'held', expected_state: { charged: true } }),
    ]);
    const held = await waitForOp(stack, created.id, 'held', (o) => o.status === 'MANUAL_REVIEW');
    expect(held).toMatchObject({ terminal_reason: 'KNOWLEDGE_CONFLICT', attempt: 0 });
    await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
    return { executionId: created.id, held, refs };
  }

  const eventsOf = async (executionId: string, operationId: string): Promise<Event[]> =>
    (await events(stack, executionId)).filter((e) => e.operation_id === operationId);

  /** Whether the reviewers' queue lists the operation (searched by its id, so no page of others hides it). */
  async function inReviewQueue(operationId: string): Promise<boolean> {
    const queue = await http<{ data: { operation: { id: string } }[] }>(
      stack.apiUrl,
      'GET',
      `/v1/review/manual-reviews?q=${operationId}`,
      { key: DEMO.reviewer },
    );
    expect(queue.status).toBe(200);
    return queue.body.data.some((item) => item.operation.id === operationId);
  }

  it.each([
    [ExecutionStatus.CANCELLED, 'execution_cancelled'],
    [ExecutionStatus.EXPIRED, 'execution_expired'],
    // An execution fails only at validation, before anything can be held: only a row from elsewhere is in this state.
    [ExecutionStatus.FAILED, 'execution_invalid'],
  ] as const)(
    'an execution %s with its never-sent hold left MANUAL_REVIEW: the sweep ends the hold CANCELLED (%s), once',
    async (end, cause) => {
      const { executionId, held, refs } = await heldBesideAWait(`eh-${end}`);
      await endAsBefore(executionId, end, cause);

      const cancelled = await waitForOp(stack, executionId, 'held', (o) => o.status === 'CANCELLED', 30_000);
      expect(cancelled.attempt).toBe(0);
      // Nobody decided it: the failure names the execution's end, not a reviewer.
      expect(cancelled.failure).toMatchObject({ code: cause });
      const log = await events(stack, executionId);
      expectLegalHistory(log);
      expect(statusPath(log, held.id)).toEqual(['PREPARED', 'MANUAL_REVIEW', 'CANCELLED']);
      const ends = log.filter((e) => e.operation_id === held.id && e.to_status === 'CANCELLED');
      expect(ends).toHaveLength(1);
      expect(ends[0].data).toMatchObject({ cause, actor: 'system' });
      const executionEnd = log.find((e) => e.type === 'execution.status_changed' && e.to_status === end)!;
      expect(ends[0].seq).toBeGreaterThan(executionEnd.seq);
      expect((await getExecution(stack, executionId)).status).toBe(end);
      expect(await inReviewQueue(held.id)).toBe(false);
      const [reconciler] = stack.running('reconciler');
      expect(
        logLines(reconciler).filter(
          (line) =>
            line.msg === 'a held, never-sent operation of an ended execution: cancelled' &&
            line.operationId === held.id,
        ),
      ).toHaveLength(1);
      const effects = await stack.effects();
      expect(refs.map((ref) => effects.charges[ref])).toEqual([undefined, undefined]);
    },
  );

  it('leaves alone a hold that was ever sent, and never-sent holds of a running or a completed execution', async () => {
    // Running (waiting for an approval): a reviewer's release of the hold would still be sent.
    const running = await heldBesideAWait('eh-running');
    // Completed around the hold: the reviewer's release is carried out too.
    const completedRef = unique('eh-completed');
    const completed = await submit(stack, [charge(completedRef, { expected_state: { charged: true } })]);
    const completedEnd = await settle(stack, completed.id);
    expect(completedEnd.status).toBe('completed');
    const completedHeld = completedEnd.operations[0];
    expect(completedHeld).toMatchObject({ status: 'MANUAL_REVIEW', attempt: 0 });
    // Sent, its outcome unknown (an SMS that cannot be read back), then its execution cancelled: its effect may exist.
    await stack.setFaults({ rules: [{ method: 'POST', path: '/v1/messages', fault: 'error_after_commit', count: 1 }] });
    const sentRef = unique('eh-sent');
    const sent = await submit(stack, [sms(sentRef), charge(unique('eh-sent-waiting'), { requires_approval: true })]);
    const sentHeld = await waitForOp(stack, sent.id, 'notify', (o) => o.status === 'MANUAL_REVIEW');
    expect(sentHeld).toMatchObject({ terminal_reason: 'CONNECTOR_ERROR', attempt: 1 });
    await waitForOp(stack, sent.id, 'charge', (o) => o.approval?.state === 'requested');
    const cancel = await http(stack.apiUrl, 'POST', `/v1/executions/${sent.id}/cancel`, { key: DEMO.agent });
    expect(cancel.status).toBe(200);
    // And a leftover the sweep does end, so the passes below are known to look.
    const leftover = await heldBesideAWait('eh-control');
    await endAsBefore(leftover.executionId, ExecutionStatus.CANCELLED, 'execution_cancelled');

    const untouched = [
      { executionId: running.executionId, operationId: running.held.id, attempt: 0 },
      { executionId: completed.id, operationId: completedHeld.id, attempt: 0 },
      { executionId: sent.id, operationId: sentHeld.id, attempt: 1 },
    ];
    const before = await Promise.all(untouched.map((u) => eventsOf(u.executionId, u.operationId)));
    await waitForOp(stack, leftover.executionId, 'held', (o) => o.status === 'CANCELLED', 30_000);
    // Two whole sweeps after all of them were in place, each of which read the held operations.
    await stack.sweepsPassed(2);

    for (const [i, u] of untouched.entries()) {
      expect(await getOperation(stack, u.operationId)).toMatchObject({ status: 'MANUAL_REVIEW', attempt: u.attempt });
      expect(await eventsOf(u.executionId, u.operationId)).toEqual(before[i]);
    }
    expect((await getExecution(stack, running.executionId)).status).toBe('waiting_for_approval');
    expect((await getExecution(stack, sent.id)).status).toBe('cancelled');
    for (const u of untouched) expect(await inReviewQueue(u.operationId)).toBe(true);
    expect(await inReviewQueue(leftover.held.id)).toBe(false);
    expect((await stack.effects()).messages[sentRef].count).toBe(1);
  });
});
