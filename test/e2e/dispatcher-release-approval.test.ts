import { DEMO, Stack } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { events, getOperation, resetSandbox, submit, waitForOp } from './dispatcher-helpers';

/**
 * An operation that requires approval but is held before it was ever asked (a knowledge conflict while resolving
 * context): a reviewer's release grants its approval with it — one statement, an `approval.decided` event after the
 * resolution — and the send guard sends a release only with a granted, unexpired approval. Before, the release was sent
 * with no approval on record at all (red team round 7b).
 */
describe('a release of a held operation that requires approval', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'relapproval' });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => resetSandbox(stack));

  it('grants the approval with the release, says so in the log, and is then sent once', async () => {
    const reference = unique('ra');
    const created = await submit(stack, [
      charge(reference, { requires_approval: true, expected_state: { charged: true } }),
    ]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect(held).toMatchObject({ terminal_reason: 'KNOWLEDGE_CONFLICT', attempt: 0, approval: null });
    // The reviewer is told, where the release is offered, that it approves too.
    expect((await getOperation(stack, held.id)).resolution_options).toContainEqual(
      expect.objectContaining({
        status: 'SENT',
        permitted: true,
        why: expect.stringContaining('releasing it grants that approval too'),
      }),
    );
    const released = await http(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'SENT', evidence: 'the conflict is understood; send it' },
    });
    expect(released.status).toBe(200);
    const sent = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'VERIFIED');
    expect(sent.attempt).toBe(1);
    expect((await stack.effects()).charges[reference]?.count).toBe(1);
    const op = await getOperation(stack, held.id);
    expect(op.approval).toMatchObject({ state: 'granted', decided_by: expect.any(String) });
    const log = (await events(stack, created.id)).filter((e) => e.operation_id === held.id).map((e) => e.type);
    const resolvedAt = log.indexOf('operation.resolved');
    expect(resolvedAt).toBeGreaterThanOrEqual(0);
    // The approval is decided by the release, after it in the log, and before anything was sent.
    expect(log[resolvedAt + 1]).toBe('approval.decided');
    expect(log.filter((t) => t.startsWith('approval.'))).toEqual(['approval.decided']);
    expect(log.indexOf('approval.decided')).toBeLessThan(log.indexOf('operation.status_changed', resolvedAt));
  });

  it('of reviewers releasing it at once, one wins: one resolution, one grant, one send', async () => {
    const reference = unique('rr');
    const created = await submit(stack, [
      charge(reference, { requires_approval: true, expected_state: { charged: true } }),
    ]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    const answers = await Promise.all(
      [1, 2, 3].map((i) =>
        http<{ type?: string }>(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
          key: DEMO.reviewer,
          body: { status: 'SENT', evidence: `reviewer ${i}: send it` },
        }),
      ),
    );
    expect(answers.map((a) => a.status).sort()).toEqual([200, 409, 409]);
    for (const lost of answers.filter((a) => a.status === 409)) expect(lost.body.type).toContain('already-decided');
    await waitForOp(stack, created.id, 'charge', (o) => o.status === 'VERIFIED');
    const log = (await events(stack, created.id)).filter((e) => e.operation_id === held.id).map((e) => e.type);
    expect(log.filter((t) => t === 'operation.resolved')).toHaveLength(1);
    expect(log.filter((t) => t === 'approval.decided')).toHaveLength(1);
    expect((await stack.effects()).charges[reference]?.count).toBe(1);
  });

  it('grants none for an operation that needs none', async () => {
    const reference = unique('rn');
    const created = await submit(stack, [charge(reference, { expected_state: { charged: true } })]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect((await getOperation(stack, held.id)).resolution_options).toContainEqual(
      expect.objectContaining({
        status: 'SENT',
        permitted: true,
        why: 'it was never sent: release it to be sent now, once',
      }),
    );
    const released = await http(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'SENT', evidence: 'send it' },
    });
    expect(released.status).toBe(200);
    // Sent by its release job (a held operation counts as settled: wait for the send's own end).
    await waitForOp(stack, created.id, 'charge', (o) => o.status === 'VERIFIED');
    expect((await stack.effects()).charges[reference]?.count).toBe(1);
    expect((await getOperation(stack, held.id)).approval).toBeNull();
    const log = (await events(stack, created.id)).filter((e) => e.operation_id === held.id).map((e) => e.type);
    expect(log.filter((t) => t.startsWith('approval.'))).toEqual([]);
  });
});
