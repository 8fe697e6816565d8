import { DEMO, Stack } from '../support/stack';
import { http, sms, submission, unique } from '../support/http';
import { Execution, Op, events, resetSandbox, settle, submit, waitForOp } from './dispatcher-helpers';

/**
 * No blind re-send through the front door (I5 across executions): the sandbox SMS provider does not deduplicate, so
 * an SMS whose send timed out may have gone out. While an operation naming its `client_ref` is sent and unsettled
 * (SENT, UNKNOWN, RECONCILING, or held in MANUAL_REVIEW after a send), a new execution — or a retry — naming the same
 * `client_ref` is refused with 409 reference-unsettled naming that operation, and nothing is written. Once a person
 * settled it, the same reference is accepted again (a deliberate second message).
 */
describe('intake: a reference whose earlier send is unsettled is not sent again', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'unsettled-ref' });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => resetSandbox(stack));

  type Problem = { type: string; detail: string; unsettled?: Record<string, unknown>; field?: string };

  async function post(body: unknown, headers: Record<string, string> = {}, key = DEMO.agent) {
    return http<Execution & Problem>(stack.apiUrl, 'POST', '/v1/executions', { key, body, headers });
  }

  async function executionCount(): Promise<number> {
    const [row] = (await stack.db.dataSource.query(`SELECT count(*) AS n FROM executions`)) as { n: string }[];
    return Number(row.n);
  }

  /** An SMS whose send timed out after the provider took it: held MANUAL_REVIEW (nothing can read an SMS back). */
  async function heldSms(ref: string, headers: Record<string, string> = {}) {
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/messages', fault: 'timeout_after_commit', count: 1 }],
    });
    const created = await post(submission([sms(ref)]), headers);
    expect(created.status).toBe(201);
    const execution = await settle(stack, created.body.id);
    const op = execution.operations[0];
    expect(op).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'CONNECTOR_ERROR', attempt: 1 });
    return { execution, op };
  }

  it('a new execution naming the client_ref of a held SMS is 409 naming it; nothing is written or sent', async () => {
    const ref = unique('unsettled-sms');
    const key = unique('unsettled-key');
    const { execution, op } = await heldSms(ref, { 'idempotency-key': key });
    expect((await stack.effects()).messages[ref].count).toBe(1);

    const before = await executionCount();
    const again = await post(submission([sms(ref)]));
    expect(again.status).toBe(409);
    expect(again.headers.get('content-type')).toContain('application/problem+json');
    expect(again.body.type).toBe('https://verity.dev/problems/reference-unsettled');
    expect(again.body.field).toBe('operations[0].params.client_ref');
    expect(again.body.unsettled).toEqual({
      operation_id: op.id,
      execution_id: execution.id,
      key: 'notify',
      status: 'MANUAL_REVIEW',
    });
    expect(again.body.detail).toContain(op.id);
    // Under another Idempotency-Key, too: a key is no licence to send again.
    const otherKey = await post(submission([sms(ref)]), { 'idempotency-key': unique('unsettled-other') });
    expect(otherKey.status).toBe(409);
    expect(await executionCount()).toBe(before);

    // The same request under its own key is still its replay, not a refusal.
    const replay = await post(submission([sms(ref)]), { 'idempotency-key': key });
    expect(replay.status).toBe(201);
    expect(replay.body.id).toBe(execution.id);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');

    // Another tenant's reference of the same spelling is its own business.
    const theirs = await post(submission([sms(ref)]), {}, DEMO.otherAgent);
    expect(theirs.status).toBe(201);
    await settle(stack, theirs.body.id, undefined, DEMO.otherAgent);

    // Once a person settled it (the message did go out), the reference may be used again: a deliberate new message.
    const resolved = await http<Op>(stack.apiUrl, 'POST', `/v1/operations/${op.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'VERIFIED', evidence: 'provider dashboard shows the message delivered' },
    });
    expect(resolved.status).toBe(200);
    const later = await submit(stack, [sms(ref)]);
    const settled = await settle(stack, later.id);
    expect(settled.operations[0].status).toBe('ACKNOWLEDGED');
  });

  it('a retry of a FAILED SMS is refused while another send of its client_ref is unsettled', async () => {
    const ref = unique('unsettled-retry');
    await stack.setFaults({ rules: [{ method: 'POST', path: '/v1/messages', fault: 'reject', count: 1 }] });
    const rejected = await settle(stack, (await submit(stack, [sms(ref)])).id);
    expect(rejected.operations[0].status).toBe('FAILED');
    const { op: held } = await heldSms(ref);
    const sent = (await stack.effects()).messages[ref].count;

    const before = await executionCount();
    const retry = await http<Problem>(stack.apiUrl, 'POST', `/v1/operations/${rejected.operations[0].id}/retry`, {
      key: DEMO.agent,
    });
    expect(retry.status).toBe(409);
    expect(retry.body.type).toBe('https://verity.dev/problems/reference-unsettled');
    expect(retry.body.unsettled).toMatchObject({ operation_id: held.id, status: 'MANUAL_REVIEW' });
    expect(await executionCount()).toBe(before);
    expect((await stack.effects()).messages[ref].count).toBe(sent);
  });

  it('an SMS accepted while another send of its client_ref was not made yet is not sent once that one is unsettled', async () => {
    // Intake let it in (the other was not sent then); by the time it is sent, the other went out and its outcome is
    // unknown: sending now would be the blind re-send intake refuses. Checked by the SENT statement, not only at intake.
    const ref = unique('unsettled-later');
    const waiting = await submit(stack, [sms(ref, { requires_approval: true })]);
    const requested = await waitForOp(stack, waiting.id, 'notify', (o) => o.approval?.state === 'requested');
    expect(requested.status).toBe('PREPARED');
    const { op: held } = await heldSms(ref);
    expect((await stack.effects()).messages[ref].count).toBe(1);

    const approved = await http<Op>(stack.apiUrl, 'POST', `/v1/operations/${requested.id}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'approve', reason: 'send it' },
    });
    expect(approved.status).toBe(200);
    const done = await settle(stack, waiting.id);
    expect(done.operations[0]).toMatchObject({
      status: 'CANCELLED',
      attempt: 0,
      failure: { code: 'reference_unsettled', retryable: true },
    });
    // Its event names the send it would have repeated.
    const cancelled = (await events(stack, waiting.id)).find((e) => e.to_status === 'CANCELLED')!;
    expect(cancelled.data).toMatchObject({
      cause: 'reference_unsettled',
      unsettled: { operation_id: held.id, status: 'MANUAL_REVIEW' },
    });
    expect((await stack.effects()).messages[ref].count).toBe(1);
  });

  it('an SMS without a client_ref is not held back by another one', async () => {
    await heldSms(unique('unsettled-any'));
    const plain = { key: 'notify', connector: 'sandbox.sms', action: 'send', params: { to: '+15550100', body: 'Hi' } };
    const created = await submit(stack, [plain]);
    expect((await settle(stack, created.id)).operations[0].status).toBe('ACKNOWLEDGED');
  });
});
