import { DEMO, Stack } from '../support/stack';
import { http, sms, unique } from '../support/http';
import {
  Execution,
  Op,
  events,
  expectLegalHistory,
  getExecution,
  getOperation,
  resetSandbox,
  submit,
  waitForOp,
  waitForResolutionPermitted,
} from './dispatcher-helpers';
import type { ProblemDetails as Problem } from '@verity/sdk';

/**
 * I14 in time: a reviewer who finds nothing at the provider cannot mark a sent operation FAILED while a call of it may
 * still be on its way (a send in flight when the operation was marked UNKNOWN, a worker in its grace period). Until
 * the bound the reconciler itself waits for before it believes an absent read, FAILED answers 409 with Retry-After and
 * writes nothing; from then it is accepted. The settle window is long here so that "before" is seconds wide.
 */
describe('api: FAILED of a sent operation waits until no call can still land', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'inflight', env: { SETTLE_WINDOW_MS: '6000' } });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => resetSandbox(stack));

  const resolve = (opId: string, status: string) =>
    http<Problem & { status: string }>(stack.apiUrl, 'POST', `/v1/operations/${opId}/resolve`, {
      key: DEMO.reviewer,
      body: { status, evidence: `the provider dashboard shows nothing: ${status}` },
    });

  it('too early: 409 resolution-not-permitted with Retry-After and nothing written; accepted once the bound passed', async () => {
    // The send is dropped: the outcome is UNKNOWN, an SMS cannot be read back, so it is held for a human at once.
    await stack.setFaults({ rules: [{ method: 'POST', path: '/v1/messages', fault: 'drop_before_commit', count: 1 }] });
    const created = await submit(stack, [sms(unique('inflight-sms'))]);
    const held = await waitForOp(stack, created.id, 'notify', (o) => o.status === 'MANUAL_REVIEW');

    const detail = await getOperation(stack, held.id);
    expect(detail.permitted_resolutions).toEqual(['VERIFIED']);
    expect(detail.resolution_options).toContainEqual({
      status: 'FAILED',
      permitted: false,
      why: expect.stringMatching(/may still reach the provider until \d{4}-\d\d-\d\dT/),
      check: null,
      available_at: expect.any(String),
    });

    const askedAt = Date.now();
    const early = await resolve(held.id, 'FAILED');
    expect(early.status).toBe(409);
    expect(early.headers.get('content-type')).toContain('application/problem+json');
    expect(early.body).toMatchObject({
      type: 'https://verity.dev/problems/resolution-not-permitted',
      current_status: 'MANUAL_REVIEW',
      permitted_resolutions: ['VERIFIED'],
      absence_evident_at: expect.any(String),
    });
    const evidentAt = Date.parse((early.body as unknown as { absence_evident_at: string }).absence_evident_at);
    // The option says when it becomes available: the same moment the refusal names.
    const waiting = detail.resolution_options!.find((o) => o.status === 'FAILED')!;
    expect(Date.parse(waiting.available_at!)).toBe(evidentAt);
    const retryAfter = Number(early.headers.get('retry-after'));
    expect(Number.isInteger(retryAfter) && retryAfter >= 1).toBe(true);
    expect(evidentAt).toBeGreaterThan(askedAt);
    const unchanged = await getOperation(stack, held.id);
    expect(unchanged.status).toBe('MANUAL_REVIEW');
    expect(unchanged.recovery_obligation!.resolution).toBeUndefined();
    expect((await events(stack, created.id)).filter((e) => e.type === 'operation.resolved')).toHaveLength(0);

    const permitted = await waitForResolutionPermitted(stack, held.id, 'FAILED');
    expect(Date.now()).toBeGreaterThanOrEqual(evidentAt);
    expect(permitted.resolution_options).toContainEqual(expect.objectContaining({ status: 'FAILED', permitted: true }));
    const accepted = await resolve(held.id, 'FAILED');
    expect(accepted.status).toBe(200);
    expect(accepted.body.status).toBe('FAILED');
    const log = await events(stack, created.id);
    expect(log.filter((e) => e.type === 'operation.resolved')).toHaveLength(1);
    expectLegalHistory(log);
  });

  /**
   * Every surface that shows a reviewer's actions on a held operation — its detail (`permitted_resolutions`, and the
   * obligation's `permitted_actions`), its execution, the list of executions and the review queue — as `resolve`
   * judges them at that moment (I14). Until 2026-12-03 the obligation's `permitted_actions` offered FAILED before the
   * bound while `resolve` refused it.
   */
  async function actionsShown(opId: string, executionId: string, queued = true) {
    const detail = await getOperation(stack, opId);
    const execution = await getExecution(stack, executionId);
    const listed = await http<{ data: Execution[] }>(stack.apiUrl, 'GET', '/v1/executions?limit=100', {
      key: DEMO.agent,
    });
    const queue = await http<{ data: { operation: Op }[] }>(
      stack.apiUrl,
      'GET',
      `/v1/review/manual-reviews?q=${encodeURIComponent(opId)}`,
      { key: DEMO.reviewer },
    );
    const inList = listed.body.data.find((e) => e.id === executionId)!.operations.find((o) => o.id === opId)!;
    return [
      detail.permitted_resolutions,
      detail.recovery_obligation!.permitted_actions,
      execution.operations.find((o) => o.id === opId)!.recovery_obligation!.permitted_actions,
      inList.recovery_obligation!.permitted_actions,
      queued
        ? queue.body.data.find((item) => item.operation.id === opId)!.operation.recovery_obligation!.permitted_actions
        : queue.body.data,
    ];
  }

  it('what every surface offers is what resolve accepts at that moment: no FAILED before the bound, FAILED after', async () => {
    await stack.setFaults({ rules: [{ method: 'POST', path: '/v1/messages', fault: 'drop_before_commit', count: 1 }] });
    const created = await submit(stack, [sms(unique('inflight-shown'))]);
    const held = await waitForOp(stack, created.id, 'notify', (o) => o.status === 'MANUAL_REVIEW');
    const before = await actionsShown(held.id, created.id);
    const early = await resolve(held.id, 'FAILED');
    // Shown before the refusal, and the refusal names a bound still ahead of that: the same moment for both.
    expect(early.status).toBe(409);
    expect(Date.parse((early.body as unknown as { absence_evident_at: string }).absence_evident_at)).toBeGreaterThan(
      Date.now(),
    );
    for (const shown of before) expect(shown).toEqual(['VERIFIED']);

    await waitForResolutionPermitted(stack, held.id, 'FAILED');
    for (const shown of await actionsShown(held.id, created.id)) expect(shown).toEqual(['VERIFIED', 'FAILED']);
    expect((await resolve(held.id, 'FAILED')).status).toBe(200);
    // Resolved, the obligation closed: nothing is offered anywhere (it is no longer in the review queue).
    for (const shown of (await actionsShown(held.id, created.id, false)).slice(0, 4)) expect(shown).toEqual([]);
  });

  it('a sent row without sent_at (old or hand-written) waits from its last change, not from its creation', async () => {
    await stack.setFaults({ rules: [{ method: 'POST', path: '/v1/messages', fault: 'drop_before_commit', count: 1 }] });
    const created = await submit(stack, [sms(unique('inflight-legacy'))]);
    const held = await waitForOp(stack, created.id, 'notify', (o) => o.status === 'MANUAL_REVIEW');
    await waitForResolutionPermitted(stack, held.id, 'FAILED');
    // As a row from before sent_at existed: created long ago, changed just now, no sent_at.
    await stack.db.dataSource.query(
      `UPDATE operations SET sent_at = NULL, created_at = now() - interval '1 hour', updated_at = now() WHERE id = $1`,
      [held.id],
    );
    const legacy = await getOperation(stack, held.id);
    expect(legacy.permitted_resolutions).toEqual(['VERIFIED']);
    const waiting = legacy.resolution_options!.find((o) => o.status === 'FAILED')!;
    expect(Date.parse(waiting.available_at!)).toBeGreaterThan(Date.now());
    expect((await resolve(held.id, 'FAILED')).status).toBe(409);
    await waitForResolutionPermitted(stack, held.id, 'FAILED');
    expect((await resolve(held.id, 'FAILED')).status).toBe(200);
  });

  it('VERIFIED is never held back: a reviewer who sees the effect may say so at once', async () => {
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/messages', fault: 'timeout_after_commit', count: 1 }],
    });
    const created = await submit(stack, [sms(unique('inflight-seen'))]);
    const held = await waitForOp(stack, created.id, 'notify', (o) => o.status === 'MANUAL_REVIEW');
    const detail = await getOperation(stack, held.id);
    expect(detail.permitted_resolutions).toEqual(['VERIFIED']);
    const accepted = await resolve(held.id, 'VERIFIED');
    expect(accepted.status).toBe(200);
    expect(accepted.body.status).toBe('VERIFIED');
  });
});
