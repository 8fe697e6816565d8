import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, sms, unique } from '../support/http';
import {
  events,
  expectLegalHistory,
  getExecution,
  getOperation,
  settle,
  submit,
  waitForOp,
} from './dispatcher-helpers';
import type { ProblemDetails as Problem } from '@verity/sdk';

/**
 * Decisions the system made first (I13): a person's decision that loses to the system is told so as it would be told it
 * lost to a person — `409 already-decided` with the system's decision, `decided_by: "system"` and when — and writes
 * nothing. Here the system's decision is an execution's deadline: it ends a hold that was never sent, and an operation
 * whose approval was asked for and never given.
 */
describe('api: decisions the system made first', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'decided-by-system' });
  });
  afterAll(async () => stack?.stop());

  const post = <T>(path: string, body: unknown) => http<T>(stack.apiUrl, 'POST', path, { key: DEMO.reviewer, body });

  it('a never-sent hold its execution’s deadline ended: a resolution answers already-decided, CANCELLED by the system', async () => {
    // The source already disagrees with what the agent expected: held before sending (a knowledge conflict). The
    // message that depends on it keeps the execution running (waiting for it) until its deadline passes.
    const created = await submit(
      stack,
      [
        charge(unique('sys-hold'), { expected_state: { charged: true } }),
        sms(unique('sys-hold-sms'), { depends_on: ['charge'] }),
      ],
      { deadline_seconds: 3 },
    );
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    const ended = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'CANCELLED');
    expect((await settle(stack, created.id)).status).toBe('expired');
    const log = await events(stack, created.id);
    const end = log.find((e) => e.operation_id === held.id && e.to_status === 'CANCELLED')!;
    expect(end).toMatchObject({ from_status: 'MANUAL_REVIEW', data: { actor: 'system' } });
    for (const body of [
      { status: 'CANCELLED', evidence: 'not wanted any more' },
      { status: 'SENT', evidence: 'send it after all' },
      { status: 'MANUAL_REVIEW', evidence: 'still looking' },
    ]) {
      const lost = await post<Problem>(`/v1/operations/${held.id}/resolve`, body);
      expect(lost.status).toBe(409);
      expect(lost.body).toMatchObject({
        type: 'https://verity.dev/problems/already-decided',
        decision: 'CANCELLED',
        decided_by: 'system',
        decided_at: end.created_at,
        cause: 'execution_expired',
        current_status: 'CANCELLED',
      });
    }
    expect(await events(stack, created.id)).toEqual(log);
    expect((await getOperation(stack, ended.id)).updated_at).toBe(ended.updated_at);
    expectLegalHistory(log);
  });

  it('an approval asked for and never given, its execution’s deadline passed: a decision answers already-decided', async () => {
    const created = await submit(stack, [charge(unique('sys-appr'), { requires_approval: true })], {
      deadline_seconds: 3,
    });
    await waitFor(
      () => events(stack, created.id),
      (log) => log.some((e) => e.type === 'approval.requested'),
    );
    const op = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'CANCELLED');
    const log = await events(stack, created.id);
    const end = log.find((e) => e.operation_id === op.id && e.to_status === 'CANCELLED')!;
    expect(end).toMatchObject({ from_status: 'PREPARED', data: { actor: 'system' } });
    for (const decision of ['approve', 'deny']) {
      const lost = await post<Problem>(`/v1/operations/${op.id}/approval`, { decision });
      expect(lost.status).toBe(409);
      expect(lost.body).toMatchObject({
        type: 'https://verity.dev/problems/already-decided',
        decision: 'cancel',
        decided_by: 'system',
        decided_at: end.created_at,
        cause: 'execution_expired',
        current_status: 'CANCELLED',
      });
    }
    expect(await events(stack, created.id)).toEqual(log);
    // Asked for, never decided, and no longer decidable: not shown as still waiting for a decision.
    const shown = await getOperation(stack, op.id);
    expect(shown.approval).toMatchObject({ state: 'withdrawn', requested_at: expect.any(String) });
    expect(shown.approval!.decided_at).toBeUndefined();
    const execution = await getExecution(stack, created.id);
    expect(execution.operations[0].approval!.state).toBe('withdrawn');
  });

  it('a never-sent hold whose approval is on record as requested: shown withdrawn, as the approval endpoint answers', async () => {
    const created = await submit(
      stack,
      [
        charge(unique('sys-held-appr'), { expected_state: { charged: true } }),
        sms(unique('sys-held-appr-sms'), { depends_on: ['charge'] }),
      ],
      { deadline_seconds: 600 },
    );
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    // As a row whose approval was asked for before it was held (a request on record: a release grants it with it).
    await stack.db.dataSource.query(
      `UPDATE operations SET approval = jsonb_build_object('state', 'requested', 'requested_at', $2::text) WHERE id = $1`,
      [held.id, new Date().toISOString()],
    );
    const answered = await post<Problem>(`/v1/operations/${held.id}/approval`, { decision: 'approve' });
    expect(answered.status).toBe(409);
    expect(answered.body).toMatchObject({
      type: 'https://verity.dev/problems/not-awaiting-approval',
      approval: 'withdrawn',
      current_status: 'MANUAL_REVIEW',
    });
    expect((await getOperation(stack, held.id)).approval).toMatchObject({ state: 'withdrawn' });
    // The review queue of approvals does not list it either; the hold's release still grants the request on record.
    const approvals = await http<{ data: { operation: { id: string } }[] }>(
      stack.apiUrl,
      'GET',
      `/v1/review/approvals?q=${encodeURIComponent(held.id)}`,
      { key: DEMO.reviewer },
    );
    expect(approvals.body.data).toEqual([]);
    const released = await post<Problem>(`/v1/operations/${held.id}/resolve`, {
      status: 'SENT',
      evidence: 'the expected state was wrong; send it',
    });
    expect(released.status).toBe(200);
    expect((await getOperation(stack, held.id)).approval).toMatchObject({ state: 'granted' });
    await settle(stack, created.id);
  });
});
