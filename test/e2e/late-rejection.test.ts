import { randomBytes } from 'node:crypto';
import { createServer, IncomingMessage, ServerResponse } from 'node:http';
import { DEMO, RunningApp, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { serveDuringDescribe } from '../support/local-server';
import { startReceiver } from './webhook-receiver';
import {
  events,
  expectLegalHistory,
  getExecution,
  getOperation,
  statusPath,
  submit,
  waitForLog,
  waitForMarkers,
  waitForOp,
  waitForResolutionPermitted,
} from './dispatcher-helpers';
import { Verity, type ProblemDetails as Problem } from '@verity/sdk';
import { allowLoopbackPort } from './connectors-support';

/** A charge at this provider, as its list of charges by reference shows it. */
interface Charge {
  id: string;
  reference: string;
  amount: number;
  currency: string;
  status: string;
  version: number;
}

/**
 * The payments provider (the sandbox.payments connector's API, a local server the stack is pointed at) declines every
 * charge (402 card_declined), or with `accept` takes it (201). Its reads of a reference answer: before a charge is asked
 * for, no charge (so the precondition read lets the send go); once one was, `afterCharge` — down (503), the charge as if
 * it had been taken, or none (a lagging replica's answer). `hold` keeps the next read waiting until it is released,
 * then answers as `afterCharge`.
 */
function decliningProvider() {
  const state = {
    accept: false,
    afterCharge: 'down' as 'down' | 'found' | 'absent',
    hold: false,
    asked: new Map<string, Charge>(),
    held: [] as { res: ServerResponse; reference: string }[],
  };
  const read = (res: ServerResponse, reference: string) => {
    const asked = state.asked.get(reference);
    if (asked && state.afterCharge === 'down') {
      res.writeHead(503, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ error: { code: 'maintenance' } }));
    }
    const shown = state.afterCharge === 'absent' ? undefined : asked;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ data: shown ? [shown] : [], as_of_version: shown ? shown.version : 0 }));
  };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://provider');
      if (req.method === 'POST' && url.pathname === '/v1/charges') {
        const { reference, amount, currency } = JSON.parse(body) as Charge;
        const taken = { id: `ch_${reference}`, reference, amount, currency, status: 'succeeded', version: 1 };
        state.asked.set(reference, taken);
        if (state.accept) {
          res.writeHead(201, { 'content-type': 'application/json' });
          return res.end(JSON.stringify(taken));
        }
        res.writeHead(402, { 'content-type': 'application/json' });
        return res.end(JSON.stringify({ error: { code: 'card_declined', message: 'the card was declined' } }));
      }
      if (req.method === 'GET' && url.pathname === '/v1/charges') {
        const reference = url.searchParams.get('reference') ?? '';
        if (state.hold) {
          state.hold = false;
          state.held.push({ res, reference });
          return;
        }
        return read(res, reference);
      }
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { code: 'not_found' } }));
    });
  });
  return {
    server,
    state,
    /** Answers the held read as the provider reads now. */
    release: () => {
      const held = state.held.shift()!;
      read(held.res, held.reference);
    },
  };
}

/**
 * The mirror of "no relabelling" (I14): a provider's rejection of a send that comes back after the sweeper marked the
 * send UNKNOWN (the dispatcher frozen past its job's lock with the 402 in hand) is kept on the operation, and a person
 * cannot record VERIFIED against it — not even one whose read of the source was made before the rejection landed and
 * whose write comes after (the read held at the provider). A VERIFIED the rejection comes after stays, but its commit
 * is `unknown`, whoever verified it.
 */
describe('a provider’s rejection that comes back after the send was marked UNKNOWN', () => {
  const provider = decliningProvider();
  const local = serveDuringDescribe(() => provider.server);
  let stack: Stack;
  /** Receives the tenant's `operation.needs_review` webhooks. */
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  beforeAll(async () => {
    receiver = await startReceiver(() => ({ status: 204 }));
    stack = await Stack.start({
      label: 'late-reject',
      apis: 0,
      dispatchers: 0,
      // sandbox.payments calls this provider; a hold is not re-read by itself while a test runs.
      env: {
        SANDBOX_URL: local.url,
        RECHECK_BACKOFF_MS: '600000',
        // A send whose source stays unreadable is held after two reads rather than six: the hold is what these tests
        // are about, not how many reads it took.
        RECONCILE_BUDGET: '2',
        SECRETS_KEY: randomBytes(32).toString('base64'),
        WEBHOOK_SCAN_INTERVAL_MS: '100',
      },
    });
    // A reviewer's read held at the provider waits there while a frozen dispatcher wakes and records its late answer.
    // The API gives up on a read after CONNECTOR_TIMEOUT_MS (1 s in tests), which a loaded machine's wake can outlast:
    // the resolution would then be refused because the source went unread, not for what these tests are about.
    stack.apiUrl = await stack.startApi({ CONNECTOR_TIMEOUT_MS: '10000' });
    await allowLoopbackPort(stack, receiver.port);
    const endpoint = await http(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
      key: DEMO.admin,
      body: { url: `${receiver.base}/review`, events: ['operation.needs_review'] },
    });
    expect(endpoint.status).toBe(201);
  });
  afterAll(async () => {
    await stack?.stop();
    await receiver?.close();
  });

  /** The `operation.needs_review` webhooks the receiver got for one operation, as their bodies. */
  const reviewWebhooksOf = (operationId: string) =>
    receiver.seen
      .map(
        (r) => JSON.parse(r.body) as { type: string; data: Record<string, unknown> & { detail: { after?: string } } },
      )
      .filter((b) => b.type === 'operation.needs_review' && b.data.operation_id === operationId);
  afterEach(async () => {
    provider.state.accept = false;
    provider.state.afterCharge = 'down';
    provider.state.hold = false;
    for (const app of stack.running('dispatcher')) {
      app.child.kill('SIGCONT');
      await stack.kill(app, 'SIGKILL');
    }
  });

  /**
   * A charge the provider declined (or took, with `accept`), whose dispatcher is frozen after the call (the answer in
   * hand) until the sweeper has marked the send UNKNOWN and the reconciler has settled or held it (`until`). SIGCONT
   * lets the late answer lose its compare-and-set; `wake` waits for the event that records it.
   */
  async function declinedWhileFrozen(
    until: (op: { status: string }) => boolean,
    recordedAs = 'operation.rejected_late',
    extra: Record<string, unknown> = {},
  ) {
    const dispatcher: RunningApp = await stack.startApp('dispatcher', { TEST_PAUSE_AFTER_CALL_MS: '5000' });
    const reference = unique('late-reject');
    const created = await submit(stack, [charge(reference)], extra);
    const [opId] = await waitForMarkers(dispatcher, 'paused after call', 1);
    dispatcher.child.kill('SIGSTOP');
    const op = await waitForOp(stack, created.id, 'charge', until);
    return {
      executionId: created.id,
      opId,
      op,
      wake: async () => {
        dispatcher.child.kill('SIGCONT');
        // What the pause waited for (the send marked UNKNOWN and settled or held) is done: SIGUSR2 ends what is left of
        // it (docs/operations.md "Test-only hooks"), rather than waiting it out after a short freeze.
        dispatcher.child.kill('SIGUSR2');
        await waitForLog(dispatcher, (l) => l.msg === 'late send outcome rejected by CAS' && l.operationId === opId);
        return waitFor(
          () => events(stack, created.id),
          (log) => log.some((e) => e.operation_id === opId && e.type === recordedAs),
          15_000,
          150,
        );
      },
    };
  }

  const resolveVerified = (opId: string) =>
    http<Problem & { status: string }>(stack.apiUrl, 'POST', `/v1/operations/${opId}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'VERIFIED', evidence: 'the charge is in their dashboard' },
    });

  const REJECTION = {
    reason: 'CONNECTOR_REJECTED',
    detail: 'provider rejected the request (402)',
    provider_error: { code: 'card_declined' },
  };

  it('lands between a reviewer’s read and write: the VERIFIED is refused with the rejection, and writes nothing', async () => {
    const held = await declinedWhileFrozen((o) => o.status === 'MANUAL_REVIEW');
    expect(held.op).toMatchObject({ terminal_reason: 'SOURCE_UNREACHABLE', rejected_at: null, rejection: null });
    expect((await getOperation(stack, held.opId)).permitted_resolutions).toContain('VERIFIED');
    // The reviewer's VERIFIED reads the source first (the provider's own lookup): that read is held at the provider.
    provider.state.hold = true;
    const resolving = resolveVerified(held.opId);
    await waitFor(
      async () => provider.state.held.length,
      (n) => n === 1,
    );
    // Meanwhile the frozen dispatcher wakes: its 402 is recorded on the hold.
    const log = await held.wake();
    expect(log.filter((e) => e.operation_id === held.opId && e.type === 'operation.rejected_late')).toHaveLength(1);
    expect(await getOperation(stack, held.opId)).toMatchObject({
      status: 'MANUAL_REVIEW',
      rejected_at: expect.any(String),
      rejection: REJECTION,
    });
    // The held read then shows the charge: nothing but the rejection on file stands against the VERIFIED now.
    provider.state.afterCharge = 'found';
    provider.release();
    const resolved = await resolving;
    expect(resolved.status).toBe(409);
    expect(resolved.body).toMatchObject({
      type: expect.stringContaining('resolution-not-permitted'),
      current_status: 'MANUAL_REVIEW',
      rejected_at: expect.any(String),
      rejection: REJECTION,
    });
    expect((resolved.body as unknown as { permitted_resolutions: string[] }).permitted_resolutions).not.toContain(
      'VERIFIED',
    );

    // Nothing written: no resolution, no move, and VERIFIED is offered nowhere any more.
    const after = await getOperation(stack, held.opId);
    expect(after.status).toBe('MANUAL_REVIEW');
    expect(after.recovery_obligation).not.toHaveProperty('resolution');
    expect(after.permitted_resolutions).not.toContain('VERIFIED');
    expect(after.resolution_options?.find((o) => o.status === 'VERIFIED')).toMatchObject({ permitted: false });
    expect(after.recovery_obligation?.permitted_actions).not.toContain('VERIFIED');
    const history = await events(stack, held.executionId);
    expectLegalHistory(history);
    expect(history.filter((e) => e.type === 'operation.resolved')).toEqual([]);
    const path = statusPath(history, held.opId);
    expect(path.at(-1)).toBe('MANUAL_REVIEW');
    expect(path).not.toContain('VERIFIED');

    // Asked again, with the rejection on file before the read: refused at once, without reading the source.
    const again = await resolveVerified(held.opId);
    expect(again.status).toBe(409);
    expect(again.body).toMatchObject({ rejected_at: after.rejected_at, rejection: REJECTION });
  });

  it('its mirror, a 2xx landing between a reviewer’s FAILED read and write: refused 409 effect-exists with the acknowledgement, nothing written', async () => {
    provider.state.accept = true;
    const held = await declinedWhileFrozen((o) => o.status === 'MANUAL_REVIEW', 'operation.acknowledged_late');
    expect(held.op).toMatchObject({ terminal_reason: 'SOURCE_UNREACHABLE', acknowledged_at: null });
    await waitForResolutionPermitted(stack, held.opId, 'FAILED');
    // The reviewer's FAILED reads the source first: that read is held at the provider.
    provider.state.hold = true;
    const resolving = http<Problem & { status: string }>(stack.apiUrl, 'POST', `/v1/operations/${held.opId}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'FAILED', evidence: 'their dashboard shows no charge' },
    });
    await waitFor(
      async () => provider.state.held.length,
      (n) => n === 1,
    );
    // Meanwhile the frozen dispatcher wakes: the provider's 201 is recorded on the hold.
    await held.wake();
    const acknowledged = await getOperation(stack, held.opId);
    expect(acknowledged).toMatchObject({ status: 'MANUAL_REVIEW', acknowledged_at: expect.any(String) });
    // The held read then misses the charge (a lagging replica): only the acknowledgement on file stands against FAILED.
    provider.state.afterCharge = 'absent';
    provider.release();
    const resolved = await resolving;
    expect(resolved.status).toBe(409);
    expect(resolved.body).toMatchObject({
      type: expect.stringContaining('effect-exists'),
      acknowledged_at: acknowledged.acknowledged_at,
      provider_ref: expect.objectContaining({ id: expect.stringMatching(/^ch_/) }),
    });

    // Nothing written: no resolution, no move, and FAILED is offered nowhere any more.
    const after = await getOperation(stack, held.opId);
    expect(after.status).toBe('MANUAL_REVIEW');
    expect(after.recovery_obligation).not.toHaveProperty('resolution');
    expect(after.permitted_resolutions).not.toContain('FAILED');
    const history = await events(stack, held.executionId);
    expectLegalHistory(history);
    expect(history.filter((e) => e.type === 'operation.resolved')).toEqual([]);
    expect(statusPath(history, held.opId)).not.toContain('FAILED');
  });

  it('without one on file, a reviewer’s VERIFIED whose read shows the charge is written, with the read it made', async () => {
    const held = await declinedWhileFrozen((o) => o.status === 'MANUAL_REVIEW');
    // The frozen worker never wakes in this test (it is killed after it): no rejection is on file.
    provider.state.afterCharge = 'found';
    const resolved = await resolveVerified(held.opId);
    // Also checked against what /docs-json describes (test/support/openapi-validator.ts): the read's kind `found` is.
    expect(resolved.status).toBe(200);
    expect(resolved.body).toMatchObject({
      status: 'VERIFIED',
      rejected_at: null,
      recovery_obligation: { resolution: { status: 'VERIFIED', read_back: { kind: 'found' } } },
    });
  });

  it('comes after a reviewer’s VERIFIED: an operation that depends on it and has not been sent is never sent', async () => {
    // The charge is held; its "Paid" SMS depends on it and waits for approval. A reviewer verifies the charge (the source
    // cannot be read now: nothing refutes the evidence), then the frozen dispatcher's 402 comes back. Whether the charge
    // happened is no longer established: the SMS saying it did must not go out on it.
    const dispatcher: RunningApp = await stack.startApp('dispatcher', { TEST_PAUSE_AFTER_CALL_MS: '5000' });
    const clientRef = unique('late-reject-dependent');
    const created = await submit(stack, [
      charge(unique('late-reject-dep')),
      {
        key: 'notify',
        connector: 'sandbox.sms',
        action: 'send',
        params: { to: '+15550100', body: 'Paid', client_ref: clientRef },
        depends_on: ['charge'],
        requires_approval: true,
      },
    ]);
    const [opId] = await waitForMarkers(dispatcher, 'paused after call', 1);
    dispatcher.child.kill('SIGSTOP');
    await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect((await resolveVerified(opId)).status).toBe(200);
    dispatcher.child.kill('SIGCONT');
    dispatcher.child.kill('SIGUSR2');
    await waitFor(
      () => events(stack, created.id),
      (log) => log.some((e) => e.operation_id === opId && e.type === 'operation.rejected_late'),
      15_000,
      150,
    );
    // The advance the contradiction sets off cancels the dependent, never sent, naming the contradicted dependency.
    const dependent = await waitForOp(stack, created.id, 'notify', (o) => o.status !== 'PREPARED');
    expect(dependent).toMatchObject({ status: 'CANCELLED', attempt: 0 });
    expect(dependent.failure).toMatchObject({ code: 'dependency_not_done' });
    const approved = await http(stack.apiUrl, 'POST', `/v1/operations/${dependent.id}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'approve', reason: 'checked by the test' },
    });
    expect(approved.status).toBe(409);
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(statusPath(log, dependent.id)).toEqual(['PREPARED', 'CANCELLED']);
    const cancel = log.find((e) => e.operation_id === dependent.id && e.to_status === 'CANCELLED');
    expect(cancel?.data).toMatchObject({
      cause: 'dependency_not_done',
      dependency: 'charge',
      dependency_status: 'VERIFIED',
      dependency_rejected_at: expect.any(String),
    });
  });

  it('comes after a reviewer’s VERIFIED: recorded on the row and in the history, and the commit is unknown', async () => {
    const held = await declinedWhileFrozen((o) => o.status === 'MANUAL_REVIEW', 'operation.rejected_late', {
      criteria: [{ key: 'paid', operation: 'charge', expect_status: 'VERIFIED' }],
    });
    // The source cannot be read now (503): nothing refutes the reviewer's evidence, and the VERIFIED is written.
    const resolved = await resolveVerified(held.opId);
    expect(resolved.status).toBe(200);
    expect(resolved.body.status).toBe('VERIFIED');
    // Another dispatcher completes the execution meanwhile: the agent's criterion holds on the VERIFIED, as the record
    // stands before the provider's answer comes back.
    await stack.startApp('dispatcher');
    await waitFor(
      () => getExecution(stack, held.executionId),
      (e) => e.status === 'completed' && e.outcome?.result === 'satisfied',
      15_000,
      100,
    );
    const log = await held.wake();
    expectLegalHistory(log);
    const late = log.filter((e) => e.operation_id === held.opId && e.type === 'operation.rejected_late');
    expect(late).toHaveLength(1);
    expect(late[0].data).toMatchObject({ ...REJECTION, after: 'VERIFIED' });
    // A receiver told of the hold is told of the contradiction too, once the outbox has passed the late event.
    const announced = await waitFor(
      async () => reviewWebhooksOf(held.opId).filter((b) => b.data.detail.after === 'VERIFIED'),
      (found) => found.length > 0,
      15_000,
      100,
    );
    expect(announced).toHaveLength(1);
    expect(announced[0].data).toMatchObject({
      status: 'VERIFIED',
      event_id: late[0].id,
      detail: { ...REJECTION, after: 'VERIFIED' },
    });
    // The status stays (it is final), but the record no longer claims the charge committed, nor that no retry is
    // needed: the charge may or may not exist, and a re-send is not safe.
    expect(await getOperation(stack, held.opId)).toMatchObject({
      status: 'VERIFIED',
      rejected_at: expect.any(String),
      rejection: REJECTION,
      commit: 'unknown',
      retry: 'forbidden',
    });
    const retry = await http(stack.apiUrl, 'POST', `/v1/operations/${held.opId}/retry`, { key: DEMO.agent });
    expect(retry.status).toBe(409);
    expect(retry.body).toMatchObject({
      type: expect.stringContaining('retry-not-allowed'),
      current_status: 'VERIFIED',
      retry: 'forbidden',
    });
    expect((await getExecution(stack, held.executionId)).effects).toMatchObject({
      summary: 'unknown',
      commit: { committed: 0, unknown: 1 },
    });
    // Nor does the outcome still say "satisfied" on a charge the provider says it declined: judged again, unmet.
    const judged = await waitFor(
      () => getExecution(stack, held.executionId),
      (e) => e.outcome?.result !== 'satisfied',
      15_000,
      100,
    );
    expect(judged.outcome?.result).toBe('unmet');
    expect(judged.criteria_results?.[0]).toMatchObject({
      key: 'paid',
      verdict: 'fail',
      rationale: expect.stringContaining('"charge" is VERIFIED, but what was recorded since contradicts it'),
    });
    // Its evidence names what failed it: the provider's late rejection, beside the move to VERIFIED (the reviewer's
    // resolution) that it contradicts — not that move alone, which reads as the evidence of a pass.
    const resolution = log.filter((e) => e.operation_id === held.opId && e.to_status === 'VERIFIED').at(-1)!;
    expect(judged.criteria_results?.[0].evidence_event_ids).toEqual([resolution.id, late[0].id]);
    const evaluated = (await events(stack, held.executionId)).filter((e) => e.type === 'outcome.evaluated').at(-1)!;
    expect(evaluated.data).toMatchObject({
      result: 'unmet',
      criteria: [{ key: 'paid', verdict: 'fail', evidence_event_ids: [resolution.id, late[0].id] }],
    });
    // And a client waiting for the execution to settle (the SDK, which reads the contradiction from `commit`) is not
    // kept waiting for an evaluation that was made.
    const settled = await new Verity({ baseUrl: stack.apiUrl, apiKey: DEMO.agent }).waitForSettled(held.executionId, {
      timeoutMs: 15_000,
    });
    expect(settled.outcome?.result).toBe('unmet');
  });

  it('comes after a VERIFIED the source’s read-back wrote: recorded too, and the commit is unknown', async () => {
    // The provider's lookup shows the charge (it answers two ways): the reconciler verifies it while the worker is frozen.
    provider.state.afterCharge = 'found';
    const verified = await declinedWhileFrozen((o) => o.status === 'VERIFIED');
    expect(verified.op.commit).toBe('committed');
    const log = await verified.wake();
    expectLegalHistory(log);
    expect(statusPath(log, verified.opId).slice(-3)).toEqual(['UNKNOWN', 'RECONCILING', 'VERIFIED']);
    const late = log.filter((e) => e.operation_id === verified.opId && e.type === 'operation.rejected_late');
    expect(late).toHaveLength(1);
    expect(late[0].data).toMatchObject({ ...REJECTION, after: 'VERIFIED' });
    expect(await getOperation(stack, verified.opId)).toMatchObject({
      status: 'VERIFIED',
      evidence: expect.objectContaining({ method: 'read_after_write' }),
      rejected_at: expect.any(String),
      commit: 'unknown',
      retry: 'forbidden',
    });
  });
});
