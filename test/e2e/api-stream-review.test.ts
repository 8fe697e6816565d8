import { createApiKey, revokeApiKey } from '@verity/persistence/api-keys';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { Event, Execution, events, getExecution, resetSandbox, submit, waitForOp } from './dispatcher-helpers';
import { SseFrame, heldOpen, openStream } from './api-sse';

/**
 * Streams that last as long as something can still change (docs/api.md, the live stream): a stream stays open
 * through a pending approval and through manual review — after the execution completed — pushes the decision and the
 * resolution, and ends with why: `settled`, `deadline` or `key_revoked`. A raw SSE client (fetch + eventsource-parser);
 * the SDK's iterator is exercised in sdk.test.ts. "Stays open" is shown by heartbeats and later events on the same
 * connection, never by a pause.
 */
describe('SSE stream through approval and manual review', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'streamreview', env: { SSE_HEARTBEAT_MS: '200' } });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => resetSandbox(stack));

  const streamOf = (id: string, key: string = DEMO.agent) =>
    openStream(`${stack.apiUrl}/v1/executions/${id}/stream`, key);
  const parsed = (frames: SseFrame[]) =>
    frames.filter((f) => f.event !== 'end').map((f) => JSON.parse(f.data) as Event);
  const isEnd = (frames: SseFrame[]) => frames.some((f) => f.event === 'end');
  const endReason = (frames: SseFrame[]) => (JSON.parse(frames[frames.length - 1].data) as { reason: string }).reason;
  const hasStatus = (frames: SseFrame[], to: string, operationId: string | null) =>
    parsed(frames).some((e) => e.to_status === to && e.operation_id === operationId);

  it('stays open through a pending approval and a manual review after completion, pushes the decision, the resolution and the outcome evaluation, then ends settled', async () => {
    // The read-back shows the charge with another amount: held for a human (INTEGRITY_MISMATCH).
    await stack.setFaults({ read_fault: 'amount_mismatch' });
    const created = await submit(stack, [charge(unique('sr-review'), { requires_approval: true })], {
      criteria: [{ key: 'paid', operation: 'charge', expect_status: 'VERIFIED' }],
    });
    const opId = created.operations[0].id;
    const stream = await streamOf(created.id);
    expect(stream.status).toBe(200);

    // Waiting for approval: heartbeats, no end.
    await stream.waitFor((f) => f.some((x) => x.event === 'approval.requested'), 30_000);
    await heldOpen(stream);
    const approved = await http(stack.apiUrl, 'POST', `/v1/operations/${opId}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'approve' },
    });
    expect(approved.status).toBe(200);

    // The decision is pushed; then the charge is sent, held, and the execution completes around the hold.
    await stream.waitFor((f) => f.some((x) => x.event === 'approval.decided'), 30_000);
    await stream.waitFor((f) => hasStatus(f, 'completed', null), 45_000);
    expect(hasStatus(stream.frames, 'MANUAL_REVIEW', opId)).toBe(true);
    // Nothing automatic will move it again, yet a reviewer will: the stream stays.
    await heldOpen(stream);

    await resetSandbox(stack);
    const resolved = await http<{ status: string }>(stack.apiUrl, 'POST', `/v1/operations/${opId}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'VERIFIED', evidence: 'provider dashboard shows the charge (stream test)' },
    });
    expect(resolved.status).toBe(200);

    const frames = await stream.waitFor(isEnd, 30_000);
    await stream.closed;
    expect(frames[frames.length - 1].event).toBe('end');
    expect(frames[frames.length - 1].id).toBeUndefined();
    expect(endReason(frames)).toBe('settled');

    const delivered = parsed(frames);
    const completedAt = delivered.findIndex((e) => e.to_status === 'completed' && e.operation_id === null);
    const later = delivered.slice(completedAt + 1);
    expect(later.map((e) => e.type)).toContain('operation.resolved');
    const resolution = later.find((e) => e.operation_id === opId && e.to_status === 'VERIFIED');
    expect(resolution).toMatchObject({ from_status: 'MANUAL_REVIEW' });
    // The criterion judged again after the resolution, pushed before the end: pending → pass.
    const evaluation = later.filter((e) => e.type === 'outcome.evaluated').pop();
    expect(evaluation?.seq).toBeGreaterThan(resolution!.seq);
    expect(evaluation?.data).toMatchObject({ result: 'satisfied', criteria: [{ key: 'paid', verdict: 'pass' }] });
    // The whole log, in order, no gap, no duplicate.
    expect(delivered.map((e) => e.id)).toEqual((await events(stack, created.id)).map((e) => e.id));
  });

  it('ends with reason deadline when the deadline of a completed execution passes with an operation still held', async () => {
    await stack.setFaults({ read_fault: 'amount_mismatch' });
    const created = await submit(stack, [charge(unique('sr-deadline'))], { deadline_seconds: 8 });
    const stream = await streamOf(created.id);
    expect(stream.status).toBe(200);

    const frames = await stream.waitFor(isEnd, 45_000);
    await stream.closed;
    expect(endReason(frames)).toBe('deadline');
    const execution = await getExecution(stack, created.id);
    // Still held: the deadline ended the stream, not a resolution.
    expect(execution.operations[0].status).toBe('MANUAL_REVIEW');
    const { deadline_at: deadlineAt } = execution as Execution & { deadline_at: string };
    expect(Date.now()).toBeGreaterThanOrEqual(new Date(deadlineAt).getTime());
    // The execution's own end was delivered before the stream's.
    expect(parsed(frames).some((e) => e.operation_id === null && e.to_status === execution.status)).toBe(true);
    expect(['completed', 'expired']).toContain(execution.status);

    // A stream opened afterwards replays the log and ends the same way at once.
    const replay = await streamOf(created.id);
    const replayed = await replay.waitFor(isEnd, 10_000);
    expect(endReason(replayed)).toBe('deadline');
    expect(parsed(replayed).map((e) => e.id)).toEqual((await events(stack, created.id)).map((e) => e.id));
  });

  it('ends with reason key_revoked when the key is revoked while a held operation keeps the stream open', async () => {
    await stack.setFaults({ read_fault: 'amount_mismatch' });
    const manager = stack.db.dataSource.manager;
    const key = await createApiKey(manager, { tenantId: 'demo', role: 'agent', label: 'stream review test' });
    const res = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: key.key,
      body: { agent_id: 'test-agent', intent: 'revoked mid-stream', operations: [charge(unique('sr-revoked'))] },
    });
    expect(res.status).toBe(201);
    await waitForOp(stack, res.body.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    await waitFor(
      () => getExecution(stack, res.body.id),
      (e) => e.status === 'completed',
    );

    const stream = await streamOf(res.body.id, key.key);
    expect(stream.status).toBe(200);
    await stream.waitFor((f) => hasStatus(f, 'completed', null));
    await heldOpen(stream);
    expect(await revokeApiKey(manager, key.id)).toBe(true);

    const frames = await stream.waitFor(isEnd, 20_000);
    await stream.closed;
    expect(endReason(frames)).toBe('key_revoked');
  });
});
