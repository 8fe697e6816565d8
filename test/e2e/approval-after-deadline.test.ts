import { DEMO, Stack } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { events, expectLegalHistory, getExecution, getOperation, submit, waitForOp } from './dispatcher-helpers';
import type { ProblemDetails as Problem } from '@verity/sdk';

/**
 * An approval decided after its execution's deadline, before the sweeper has expired the execution (no reconciler runs
 * here, so the window stays open): a grant then could never be carried out — the send guard sends nothing past the
 * deadline — so approve is refused in the statement that would write it, and says why. A deny still ends it.
 */
describe('api: approving after the execution’s deadline', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'approval-deadline', reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  const decide = (opId: string, body: unknown) =>
    http<Problem & { deadline_at?: string }>(stack.apiUrl, 'POST', `/v1/operations/${opId}/approval`, {
      key: DEMO.reviewer,
      body,
    });

  /** A charge waiting for approval whose execution's deadline has just passed (set on the row: nothing expires it). */
  async function waitingPastDeadline() {
    const created = await submit(stack, [charge(unique('late-approval'), { requires_approval: true })]);
    const waiting = await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
    await stack.db.dataSource.query(`UPDATE executions SET deadline_at = now() - interval '1 second' WHERE id = $1`, [
      created.id,
    ]);
    return { executionId: created.id, opId: waiting.id, before: await events(stack, created.id) };
  }

  const approvalsQueued = async (executionId: string) => {
    const queue = await http<{ data: { operation: { id: string } }[] }>(
      stack.apiUrl,
      'GET',
      `/v1/review/approvals?q=${executionId}`,
      { key: DEMO.reviewer },
    );
    expect(queue.status).toBe(200);
    return queue.body.data.map((item) => item.operation.id);
  };
  const approvalsCounted = async () =>
    (await http<{ approvals: number }>(stack.apiUrl, 'GET', '/v1/review/summary', { key: DEMO.reviewer })).body
      .approvals;

  it('an approve is 409 not-awaiting-approval naming the deadline, and writes nothing', async () => {
    const created = await submit(stack, [charge(unique('queued-approval'), { requires_approval: true })]);
    const queued = await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
    expect(await approvalsQueued(created.id)).toEqual([queued.id]);
    const counted = await approvalsCounted();
    const { executionId, opId, before } = await waitingPastDeadline();
    // Not offered to a reviewer any more: in neither the approvals queue nor its count.
    expect(await approvalsQueued(executionId)).toEqual([]);
    expect(await approvalsCounted()).toBe(counted);
    const approved = await decide(opId, { decision: 'approve', reason: 'looks fine' });
    expect(approved.status).toBe(409);
    expect(approved.body).toMatchObject({
      type: expect.stringContaining('not-awaiting-approval'),
      current_status: 'PREPARED',
      approval: 'withdrawn',
      deadline_at: expect.any(String),
    });
    expect(approved.body.detail).toContain('deadline passed');
    expect(Date.parse(approved.body.deadline_at!)).toBeLessThan(Date.now());
    // The operation says the same as the answer, wherever it is read: the request no longer waits for anyone.
    expect(await getOperation(stack, opId)).toMatchObject({ status: 'PREPARED', approval: { state: 'withdrawn' } });
    expect((await getExecution(stack, executionId)).operations[0].approval).toMatchObject({ state: 'withdrawn' });
    expect(await events(stack, executionId)).toEqual(before);
    // The request is still on record as it was: only how it is shown changed.
    const [row] = (await stack.db.dataSource.query(`SELECT approval->>'state' AS state FROM operations WHERE id = $1`, [
      opId,
    ])) as { state: string }[];
    expect(row.state).toBe('requested');
  });

  it('a deny is still recorded: it ends the operation, as it would have before the deadline', async () => {
    const { executionId, opId } = await waitingPastDeadline();
    const denied = await decide(opId, { decision: 'deny', reason: 'too late anyway' });
    expect(denied.status).toBe(200);
    expect(await getOperation(stack, opId)).toMatchObject({ status: 'CANCELLED', approval: { state: 'denied' } });
    expectLegalHistory(await events(stack, executionId));
  });
});
