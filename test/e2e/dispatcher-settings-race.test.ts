import { DEMO, RunningApp, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import {
  events,
  executionPath,
  expectLegalHistory,
  getExecution,
  getOperation,
  logLines,
  markedOperations,
  statusPath,
  submit,
  waitForLog,
  waitForMarkers,
  waitForOp,
} from './dispatcher-helpers';

/**
 * How long the dispatcher waits at its pause point: the window in which the test spots the marker and changes what the
 * send was judged on (an admin's PUT through the API, a cancel). 1.5 s was outlasted by a loaded machine: the send then
 * went ahead before the change, which is not the race these tests are about.
 */
const PAUSE_MS = '5000';

/**
 * Ends the pause the dispatcher waits at (SIGUSR2, docs/operations.md "Test-only hooks") once the test has made its
 * change: the rest of the pause would only be waited out.
 */
function endPause(dispatcher: RunningApp): void {
  dispatcher.child.kill('SIGUSR2');
}

/** Waits until `opId` has logged the pause marker `count` times, then ends that pause. */
async function endPauseNumber(dispatcher: RunningApp, marker: string, opId: string, count: number): Promise<void> {
  await waitFor(
    async () => markedOperations(dispatcher, marker).filter((id) => id === opId).length,
    (n) => n >= count,
    30_000,
    20,
  );
  endPause(dispatcher);
}

/** A charge whose expected state is not there: held for a knowledge conflict before anything is sent. */
async function heldCharge(stack: Stack, label: string) {
  const reference = unique(label);
  const created = await submit(stack, [charge(reference, { expected_state: { charged: true } })]);
  const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
  return { reference, created, held };
}

/** A reviewer releases the held operation (resolves it SENT): a dispatch job is to send it. */
async function release(stack: Stack, operationId: string): Promise<void> {
  const released = await http(stack.apiUrl, 'POST', `/v1/operations/${operationId}/resolve`, {
    key: DEMO.reviewer,
    body: { status: 'SENT', evidence: 'checked by the test: release it' },
  });
  expect(released.status).toBe(200);
}

/**
 * A send is prepared from the tenant's settings as the sender read them; the SENT statement commits it only while they
 * are still the stored ones (the send guard's `settings_changed`). Here a reviewer's release — a dispatch job — reads
 * the settings (no caps), and the admin sets a cap before its SENT statement: the statement changes nothing, the job
 * reads again and meets the cap. Nothing reaches the provider.
 */
describe('dispatcher: settings changed between the sender’s read and its SENT statement', () => {
  let stack: Stack;
  let dispatcher: RunningApp;
  beforeAll(async () => {
    // No sweeper pass re-advances the execution while its send waits at the pause (stale after ten minutes): another
    // pass would read the change and send or hold the charge itself, around the statement these tests are about.
    stack = await Stack.start({ label: 'setrace', dispatchers: 0, env: { STALE_EXECUTION_MS: '600000' } });
    // Every send waits after its reads, right before the SENT statement (a hold is no send: it does not wait).
    dispatcher = await stack.startApp('dispatcher', { TEST_PAUSE_BEFORE_SENT_MS: PAUSE_MS });
  });
  afterAll(async () => stack?.stop());

  it('a reviewer’s release prepared before a new cap is refused, then prepared again and cancelled by the cap', async () => {
    const { reference, created, held } = await heldCharge(stack, 'setrace');
    expect(held).toMatchObject({ terminal_reason: 'KNOWLEDGE_CONFLICT', attempt: 0 });
    await release(stack, held.id);

    // The release's dispatch job has read the operation and the settings (no caps) and waits before SENT.
    await waitForMarkers(dispatcher, 'paused before SENT');
    const capped = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/sandbox.payments', {
      key: DEMO.admin,
      body: { spending_caps: [{ period: 'day', max_amount: 100, amount_field: 'amount' }] },
    });
    expect(capped.status).toBe(200);
    endPause(dispatcher);

    const done = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'CANCELLED');
    expect(done).toMatchObject({ attempt: 0, evidence: { method: 'spending_cap', rule: 'max_amount' } });
    // The cap refused it, not the reviewer (who asked for the send): 1250 is above the cap's 100 by itself.
    expect(done.failure).toMatchObject({ code: 'amount_above_cap', category: 'policy', retryable: false });
    expect((await stack.effects()).charges[reference]).toBeUndefined();
    const refusals = logLines(dispatcher).filter(
      (line) => line.msg === 'dispatch refused by the send guard' && line.operationId === held.id,
    );
    expect(refusals).toEqual([expect.objectContaining({ reasons: ['settings_changed'] })]);
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(statusPath(log, held.id)).toEqual(['PREPARED', 'MANUAL_REVIEW', 'CANCELLED']);
  });

  it('a send judged before an approval rule was added is refused, and waits for the approval the rule asks for', () =>
    approvalRuleAddedWhileSending(stack, dispatcher, ['approval_policy_changed']));
});

/** The same with dispatch jobs (SEND_IN_ADVANCE off): the job tries once more from a fresh read, then hands over. */
describe('dispatcher: approval policy changed under a dispatch job’s send', () => {
  let stack: Stack;
  let dispatcher: RunningApp;
  beforeAll(async () => {
    // No sweeper pass re-advances the execution here (stale after ten minutes): the hand-over must come from the job.
    stack = await Stack.start({ label: 'polrace', dispatchers: 0, env: { STALE_EXECUTION_MS: '600000' } });
    dispatcher = await stack.startApp('dispatcher', { TEST_PAUSE_BEFORE_SENT_MS: PAUSE_MS, SEND_IN_ADVANCE: 'false' });
  });
  afterAll(async () => stack?.stop());

  it('refused for the changed policy, then for the approval the new rule asks for; approved, sent once', () =>
    approvalRuleAddedWhileSending(stack, dispatcher, ['approval_policy_changed', 'approval_not_granted']));
});

/**
 * A reviewer's release of a charge that needed no approval is read by its dispatch job, and an admin adds a rule asking
 * approval for every charge before its SENT statement. The statement compares the policy the release was judged with,
 * as a dispatch's does: refused, read again, and withdrawn for want of the approval the rule asks for (a reviewer's next
 * release grants it). Before, the release's statement checked only the approval the stale read asked for: the charge was
 * sent under a policy that had required approval since before the send.
 */
describe('dispatcher: an approval rule added under a reviewer’s release', () => {
  let stack: Stack;
  let dispatcher: RunningApp;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'relpolrace', dispatchers: 0, env: { STALE_EXECUTION_MS: '600000' } });
    dispatcher = await stack.startApp('dispatcher', { TEST_PAUSE_BEFORE_SENT_MS: PAUSE_MS });
  });
  afterAll(async () => stack?.stop());

  it('is refused for the changed policy, withdrawn for the approval it lacks, and never sent', async () => {
    const { reference, created, held } = await heldCharge(stack, 'relpolrace');
    expect(held).toMatchObject({ terminal_reason: 'KNOWLEDGE_CONFLICT', attempt: 0, approval: null });
    await release(stack, held.id);
    // Released while no rule asked for approval: no grant with it.
    expect((await getOperation(stack, held.id)).approval).toBeNull();

    // The release's dispatch job has read the policy (no rule) and waits before SENT; the admin adds a rule meanwhile.
    await waitForMarkers(dispatcher, 'paused before SENT');
    const ruled = await http(stack.apiUrl, 'PUT', '/v1/admin/policy', {
      key: DEMO.admin,
      body: { approval_rules: [{ connector: 'sandbox.payments' }] },
    });
    expect(ruled.status).toBe(200);
    endPause(dispatcher);
    // Until the release is withdrawn or sent: a second try, from a fresh read, waits at the same point (nothing more to
    // change there), and is let go (a signal while no pause runs does nothing).
    const log = await waitFor(
      async () => {
        if (markedOperations(dispatcher, 'paused before SENT').filter((id) => id === held.id).length >= 2) {
          endPause(dispatcher);
        }
        return events(stack, created.id);
      },
      (all) =>
        all.some(
          (e) =>
            e.operation_id === held.id &&
            (e.type === 'operation.release_withdrawn' ||
              (e.type === 'operation.status_changed' && e.to_status === 'SENT')),
        ),
      30_000,
      50,
    );
    expect((await stack.effects()).charges[reference]).toBeUndefined();
    expect(await getOperation(stack, held.id)).toMatchObject({ status: 'MANUAL_REVIEW', attempt: 0, approval: null });
    const refusals = logLines(dispatcher)
      .filter((line) => line.msg === 'dispatch refused by the send guard' && line.operationId === held.id)
      .map((line) => line.reasons);
    expect(refusals).toEqual([['approval_policy_changed'], ['approval_not_granted']]);
    expectLegalHistory(log);
    expect(statusPath(log, held.id)).toEqual(['PREPARED', 'MANUAL_REVIEW']);

    // The reviewer's next release grants the approval the rule asks for, and is sent once.
    const again = await http(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'SENT', evidence: 'checked by the test: release it, approved' },
    });
    expect(again.status).toBe(200);
    await endPauseNumber(dispatcher, 'paused before SENT', held.id, 3);
    const verified = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'VERIFIED');
    expect(verified).toMatchObject({ attempt: 1, approval: { state: 'granted' } });
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });
});

/** A reviewer's release can outlive what it needs: the SENT statement refuses it, and it is withdrawn, not lost. */
describe('dispatcher: a release its execution’s cancel overtakes', () => {
  let stack: Stack;
  let dispatcher: RunningApp;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'relrace', dispatchers: 0 });
    dispatcher = await stack.startApp('dispatcher', { TEST_PAUSE_BEFORE_SENT_MS: PAUSE_MS });
  });
  afterAll(async () => stack?.stop());

  it('is refused at SENT: the cancel ended the held operation CANCELLED first, and nothing is sent', async () => {
    const waitingRef = unique('relrace-waiting');
    const heldRef = unique('relrace-held');
    // One charge waits for approval (the execution stays open), the other is held for a knowledge conflict.
    const created = await submit(stack, [
      charge(waitingRef, { requires_approval: true }),
      charge(heldRef, { key: 'second', expected_state: { charged: true } }),
    ]);
    const held = await waitForOp(stack, created.id, 'second', (o) => o.status === 'MANUAL_REVIEW');
    await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
    await release(stack, held.id);
    // The release's dispatch job has read it and waits before SENT; the agent cancels the execution meanwhile.
    await waitFor(
      async () => markedOperations(dispatcher, 'paused before SENT'),
      (ids) => ids.includes(held.id),
      30_000,
      20,
    );
    const cancelled = await http(stack.apiUrl, 'POST', `/v1/executions/${created.id}/cancel`, { key: DEMO.agent });
    expect(cancelled.status).toBe(200);
    // The cancel ended the held, never-sent operation with the execution, in its own transaction.
    expect(await getOperation(stack, held.id)).toMatchObject({ status: 'CANCELLED', attempt: 0 });
    endPause(dispatcher);

    // The paused job then reaches its SENT statement, which finds the operation no longer held: nothing is sent.
    const done = await waitForLog(dispatcher, (line) => line.msg === 'dispatch' && line.operationId === held.id);
    expect(String(done.outcome)).not.toMatch(/^sent/);
    expect(await getOperation(stack, held.id)).toMatchObject({ status: 'CANCELLED', attempt: 0 });
    const log = await events(stack, created.id);
    expect(log.some((e) => e.type === 'operation.release_withdrawn')).toBe(false);
    expect(statusPath(log, held.id)).toEqual(['PREPARED', 'MANUAL_REVIEW', 'CANCELLED']);
    const effects = await stack.effects();
    expect([effects.charges[waitingRef], effects.charges[heldRef]]).toEqual([undefined, undefined]);
    expectLegalHistory(log);
  });
});

/**
 * A charge judged without approval waits before its SENT statement; the admin adds a rule asking approval for every
 * charge. The statement compares the policy it was judged with: refused, read again, the approval is asked for;
 * approved, the charge is sent once. `refusals`: the send guard's refusals the dispatcher logs on the way.
 */
async function approvalRuleAddedWhileSending(stack: Stack, dispatcher: RunningApp, refusals: string[]): Promise<void> {
  // A cap another case left on the connector is lifted: this case is about the approval policy alone.
  const uncapped = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/sandbox.payments', {
    key: DEMO.admin,
    body: { spending_caps: [] },
  });
  expect(uncapped.status).toBe(200);
  const reference = unique('policyrace');
  const created = await submit(stack, [charge(reference)]);
  // The sender judged the charge (no rule: no approval needed) and waits before its SENT statement.
  const charging = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'PREPARED');
  await waitFor(
    async () => markedOperations(dispatcher, 'paused before SENT'),
    (ids) => ids.includes(charging.id),
    30_000,
    20,
  );
  const ruled = await http(stack.apiUrl, 'PUT', '/v1/admin/policy', {
    key: DEMO.admin,
    body: { approval_rules: [{ connector: 'sandbox.payments' }] },
  });
  expect(ruled.status).toBe(200);
  endPause(dispatcher);
  // Each later try that reaches the SENT statement (a dispatch job's, refused for the approval) waits there too.
  for (let tried = 2; tried <= refusals.length; tried += 1)
    await endPauseNumber(dispatcher, 'paused before SENT', charging.id, tried);

  // The SENT statement compares the policy it was judged with: refused; the job reads again and asks for approval.
  const waiting = await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
  expect(waiting).toMatchObject({ status: 'PREPARED', attempt: 0 });
  // The execution moves on in a statement after the approval request's.
  await waitFor(
    () => getExecution(stack, created.id),
    (execution) => execution.status === 'waiting_for_approval',
  );
  expect((await stack.effects()).charges[reference]).toBeUndefined();
  // The dispatcher's log reaches this process after its writes: wait for the lines, then compare.
  const logged = await waitFor(
    async () =>
      logLines(dispatcher)
        .filter((line) => line.msg === 'dispatch refused by the send guard' && line.operationId === charging.id)
        .map((line) => line.reasons),
    (lines) => lines.length >= refusals.length,
  );
  expect(logged).toEqual(refusals.map((reason) => [reason]));

  // Approved, it is sent once.
  const approved = await http(stack.apiUrl, 'POST', `/v1/operations/${charging.id}/approval`, {
    key: DEMO.reviewer,
    body: { decision: 'approve', reason: 'checked by the test' },
  });
  expect(approved.status).toBe(200);
  // The approved send waits before its SENT statement as every send does here: nothing is left to change there.
  await endPauseNumber(dispatcher, 'paused before SENT', charging.id, refusals.length + 1);
  const verified = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'VERIFIED');
  expect(verified.attempt).toBe(1);
  expect((await stack.effects()).charges[reference].count).toBe(1);
  const log = await events(stack, created.id);
  expectLegalHistory(log);
  expect(statusPath(log, charging.id)).toEqual(['PREPARED', 'SENT', 'ACKNOWLEDGED', 'VERIFIED']);
  expect(executionPath(log)).toContain('waiting_for_approval');
}

/**
 * A spending cap refuses a send, and the admin raises the cap before the refusal is written: the CANCELLED statement
 * checks the send guard itself (`settings_changed`), so the operation is not cancelled for a cap it no longer has — it
 * is prepared again from the new settings and sent. (The refusal was written after a separate read of the guard: a
 * change committed between that read and the cancel ended the operation CANCELLED under the raised cap.)
 */
describe('dispatcher: a spending cap raised while its refusal is being written', () => {
  let stack: Stack;
  let dispatcher: RunningApp;
  beforeAll(async () => {
    // As above: no sweeper pass prepares the charge again from the raised cap while the refusal waits at the pause.
    stack = await Stack.start({ label: 'caprace', dispatchers: 0, env: { STALE_EXECUTION_MS: '600000' } });
    dispatcher = await stack.startApp('dispatcher', { TEST_PAUSE_BEFORE_CAP_REFUSAL_MS: PAUSE_MS });
  });
  afterAll(async () => stack?.stop());

  const putCap = (max_amount: number) =>
    http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/sandbox.payments', {
      key: DEMO.admin,
      body: { spending_caps: [{ period: 'day', max_amount, amount_field: 'amount' }] },
    });

  it('is not cancelled for the cap it no longer has: prepared again, and sent under the raised cap', async () => {
    expect((await putCap(100)).status).toBe(200);
    const reference = unique('caprace');
    const created = await submit(stack, [charge(reference)]);
    // The cap of 100 refused the charge of 1250; the dispatcher waits right before the statement that cancels it.
    const [opId] = await waitForMarkers(dispatcher, 'paused before cap refusal');
    expect((await putCap(100_000)).status).toBe(200);
    endPause(dispatcher);

    const done = await waitForOp(stack, created.id, 'charge', (o) => ['VERIFIED', 'CANCELLED'].includes(o.status));
    expect(done).toMatchObject({ id: opId, status: 'VERIFIED', attempt: 1 });
    expect((await stack.effects()).charges[reference].count).toBe(1);
    const refusals = logLines(dispatcher).filter(
      (line) => line.msg === 'dispatch refused by the send guard' && line.operationId === opId,
    );
    expect(refusals).toEqual([expect.objectContaining({ reasons: ['settings_changed'] })]);
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(statusPath(log, opId)).not.toContain('CANCELLED');
  });
});
