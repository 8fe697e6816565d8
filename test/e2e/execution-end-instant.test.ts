import type { ProblemDetails as Problem } from '@verity/sdk';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, sms, unique } from '../support/http';
import { Event, Execution, Op, events, getExecution, submit, waitForOp } from './dispatcher-helpers';

/**
 * One end, one instant: the time an execution's or operation's `failure.at` names is the time of the event that made
 * it, and the `decided_at` a second caller's 409 already-decided names. A cancel's `failure.at` was read from the
 * database's clock before the cancel's statement, some 30 ms before the time that statement stamped its event with.
 */
describe('an ended execution or operation names one instant for its end', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'end-instant' });
  }, 60_000);
  afterAll(async () => stack?.stop());

  type Failure = { code: string; at: string };

  /** The one event that moved the execution into `status`. */
  async function executionMove(executionId: string, status: string): Promise<Event> {
    const log = await events(stack, executionId);
    const moves = log.filter((e) => e.type === 'execution.status_changed' && e.to_status === status);
    expect(moves).toHaveLength(1);
    return moves[0];
  }

  it('a cancel: failure.at is the cancel event’s time and the decided_at a second cancel is answered with', async () => {
    const execution = await submit(stack, [charge(unique('instant-cancel'), { requires_approval: true })]);
    await waitFor(
      () => events(stack, execution.id),
      (log) => log.some((e) => e.type === 'approval.requested'),
    );
    const cancelled = await http<Execution>(stack.apiUrl, 'POST', `/v1/executions/${execution.id}/cancel`, {
      key: DEMO.agent,
      body: { reason: 'not wanted' },
    });
    expect(cancelled.status).toBe(200);
    const again = await http<Problem & { decided_at: string }>(
      stack.apiUrl,
      'POST',
      `/v1/executions/${execution.id}/cancel`,
      { key: DEMO.agent, body: {} },
    );
    expect(again.status).toBe(409);
    expect(again.body).toMatchObject({ type: 'https://verity.dev/problems/already-decided', decision: 'cancel' });

    const failure = cancelled.body.failure as Failure;
    expect(failure.code).toBe('cancelled_by_caller');
    const move = await executionMove(execution.id, 'cancelled');
    expect(again.body.decided_at).toBe(failure.at);
    expect(move.created_at).toBe(failure.at);
    expect((move.data as { failure: Failure }).failure).toEqual(failure);
    expect((await getExecution(stack, execution.id)).failure).toEqual(failure);
  });

  it('an expiry: failure.at is the time of the event that expired it', async () => {
    const execution = await submit(
      stack,
      [
        charge(unique('instant-expiry'), { expected_state: { charged: true } }),
        sms(unique('instant-expiry-sms'), { depends_on: ['charge'] }),
      ],
      { deadline_seconds: 3 },
    );
    const expired = await waitFor(
      () => getExecution(stack, execution.id),
      (e) => e.status === 'expired',
      45_000,
      100,
    );
    const failure = expired.failure as Failure;
    expect(failure.code).toBe('deadline_exceeded');
    const move = await executionMove(execution.id, 'expired');
    expect(move.created_at).toBe(failure.at);
    expect((move.data as { failure: Failure }).failure).toEqual(failure);
  });

  it('a deny: the operation’s failure.at, its approval’s decided_at and the decision’s events are one instant', async () => {
    const execution = await submit(stack, [charge(unique('instant-deny'), { requires_approval: true })]);
    const opId = execution.operations[0].id;
    await waitFor(
      () => events(stack, execution.id),
      (log) => log.some((e) => e.type === 'approval.requested'),
    );
    const denied = await http<Op>(stack.apiUrl, 'POST', `/v1/operations/${opId}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'deny', reason: 'not this one' },
    });
    expect(denied.status).toBe(200);
    const again = await http<Problem & { decided_at: string }>(
      stack.apiUrl,
      'POST',
      `/v1/operations/${opId}/approval`,
      { key: DEMO.reviewer, body: { decision: 'deny' } },
    );
    expect(again.status).toBe(409);
    const op = await waitForOp(stack, execution.id, 'charge', (o) => o.failure !== null);
    const decidedAt = op.approval!.decided_at!;
    expect(op.failure!.at).toBe(decidedAt);
    expect(again.body.decided_at).toBe(decidedAt);
    const log = (await events(stack, execution.id)).filter(
      (e) => e.operation_id === opId && (e.type === 'approval.decided' || e.to_status === op.status),
    );
    expect(log.map((e) => [e.type, e.created_at])).toEqual([
      ['approval.decided', decidedAt],
      ['operation.status_changed', decidedAt],
    ]);
  });
});
