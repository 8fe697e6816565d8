import { DEMO, RunningApp, Stack, waitFor } from '../support/stack';
import { charge, http, sms, unique } from '../support/http';
import {
  events,
  expectLegalHistory,
  getExecution,
  getOperation,
  logLines,
  markedOperations,
  waitForMarkers,
  settle,
  stackQueue,
  statusPath,
  submit,
  waitForLog,
  waitForOp,
  waitForResolutionPermitted,
} from './dispatcher-helpers';

/**
 * I3 and I12: a dispatcher killed or frozen at the worst moments never causes a second effect. The kill points
 * are the test-only hooks TEST_PAUSE_AFTER_SENT_MS / TEST_PAUSE_AFTER_CALL_MS (docs/operations.md): the dispatcher logs
 * a marker and sleeps exactly there, and the test SIGKILLs or SIGSTOPs it on the marker.
 */
describe('dispatcher: crashes and pauses around the send', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'dcrash', dispatchers: 0 });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => {
    for (const app of stack.running('dispatcher')) {
      app.child.kill('SIGCONT');
      await stack.kill(app, 'SIGKILL');
    }
    if (stack.running('reconciler').length === 0) await stack.startApp('reconciler');
  });

  async function pausedDispatcher(env: Record<string, string>): Promise<RunningApp> {
    return stack.startApp('dispatcher', env);
  }

  /**
   * Two payments and an SMS, their dispatcher SIGKILLed once all three are paused at `marker`; a fresh dispatcher
   * then takes over. Returns the settled execution and its (legal) event log.
   */
  async function killedAt(pause: Record<string, string>, marker: string, label: string) {
    const a = await pausedDispatcher(pause);
    const refs = [unique(`${label}-a`), unique(`${label}-b`)];
    const clientRef = unique(`${label}-sms`);
    const created = await submit(stack, [
      charge(refs[0], { key: 'a' }),
      charge(refs[1], { key: 'b' }),
      sms(clientRef, { key: 'c' }),
    ]);
    await waitForMarkers(a, marker, 3);
    await stack.kill(a, 'SIGKILL');
    await stack.startApp('dispatcher');

    const execution = await settle(stack, created.id);
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    return { refs, clientRef, execution, log };
  }

  it('SIGKILL right after SENT is committed, before the call: no effect, every operation UNKNOWN, then settled', async () => {
    const { refs, clientRef, execution, log } = await killedAt(
      { TEST_PAUSE_AFTER_SENT_MS: '60000' },
      'paused after SENT',
      'kill-sent',
    );
    for (const op of execution.operations) {
      const path = statusPath(log, op.id);
      expect(path.slice(0, 3)).toEqual(['PREPARED', 'SENT', 'UNKNOWN']);
      expect(path).not.toContain('ACKNOWLEDGED');
      const unknown = log.find((e) => e.operation_id === op.id && e.to_status === 'UNKNOWN')!;
      expect(String(unknown.data.detail)).toContain('left SENT with no live job: its worker stopped');
      expect(op.attempt).toBe(1);
    }
    // Charges: the source proves them absent (FAILED); the SMS cannot be read back, so a human decides.
    expect(execution.operations.map((o) => o.status)).toEqual(['FAILED', 'FAILED', 'MANUAL_REVIEW']);
    const effects = await stack.effects();
    expect(effects.charges[refs[0]]).toBeUndefined();
    expect(effects.charges[refs[1]]).toBeUndefined();
    expect(effects.messages[clientRef]).toBeUndefined();
  });

  it('SIGKILL after the provider committed, before ACKNOWLEDGED is written: one effect each, UNKNOWN, then settled', async () => {
    const { refs, clientRef, execution, log } = await killedAt(
      { TEST_PAUSE_AFTER_CALL_MS: '60000' },
      'paused after call',
      'kill-call',
    );
    for (const op of execution.operations) {
      const path = statusPath(log, op.id);
      expect(path.slice(0, 3)).toEqual(['PREPARED', 'SENT', 'UNKNOWN']);
      expect(path).not.toContain('ACKNOWLEDGED');
      expect(path).not.toContain('FAILED');
    }
    expect(execution.operations.map((o) => o.status)).toEqual(['VERIFIED', 'VERIFIED', 'MANUAL_REVIEW']);
    const effects = await stack.effects();
    expect(effects.charges[refs[0]].count).toBe(1);
    expect(effects.charges[refs[1]].count).toBe(1);
    expect(effects.messages[clientRef].count).toBe(1);
    expect(effects.duplicates).toEqual([]);
  });

  it('a later job that finds the operation already SENT marks it UNKNOWN and never calls the connector', async () => {
    // No reconciler (so no sweeper) while this runs: the UNKNOWN can only come from the second dispatch job.
    for (const r of stack.running('reconciler')) await stack.kill(r, 'SIGTERM');
    const a = await pausedDispatcher({ TEST_PAUSE_AFTER_SENT_MS: '60000' });
    const reference = unique('dup-job');
    const created = await submit(stack, [charge(reference)]);
    const [opId] = await waitForMarkers(a, 'paused after SENT', 1);
    await stack.kill(a, 'SIGKILL');
    const queue = stackQueue(stack, 'dispatch');
    await queue.add('dispatch-operation', { operationId: opId }, { jobId: `${opId}.dispatch.duplicate`, attempts: 1 });
    await queue.close();
    await stack.startApp('dispatcher');

    await waitForOp(stack, created.id, 'charge', (o) => o.status === 'UNKNOWN');
    const log = await events(stack, created.id);
    const unknown = log.find((e) => e.operation_id === opId && e.to_status === 'UNKNOWN')!;
    expect(String(unknown.data.detail)).toContain('found already SENT by a later job');
    expect((await stack.effects()).charges[reference]).toBeUndefined();

    await stack.startApp('reconciler');
    const execution = await settle(stack, created.id);
    expect(execution.operations[0].status).toBe('FAILED');
    expect((await stack.effects()).charges[reference]).toBeUndefined();
  });

  it('SIGSTOP after the call past the job lock; others take over; SIGCONT: one effect, the late write is rejected', async () => {
    // Long enough that the test surely stops it mid-pause; the stop then outlasts the job lock.
    const a = await pausedDispatcher({ TEST_PAUSE_AFTER_CALL_MS: '5000' });
    const reference = unique('stop-call');
    const created = await submit(stack, [charge(reference)]);
    const [opId] = await waitForMarkers(a, 'paused after call', 1);
    a.child.kill('SIGSTOP');
    await stack.startApp('dispatcher');

    // The lock runs out (DISPATCH_LOCK_MS 3000), the sweeper marks the SENT operation UNKNOWN, the reconciler reads it.
    const verified = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'VERIFIED');
    a.child.kill('SIGCONT');
    await waitForLog(a, (l) => l.msg === 'late send outcome rejected by CAS' && l.operationId === opId);

    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(statusPath(log, opId)).toEqual(['PREPARED', 'SENT', 'UNKNOWN', 'RECONCILING', 'VERIFIED']);
    expect(log.some((e) => e.operation_id === opId && e.to_status === 'ACKNOWLEDGED')).toBe(false);
    expect(verified.evidence).toMatchObject({ method: 'read_after_write', record: { reference } });
    expect((await getExecution(stack, created.id)).operations[0].status).toBe('VERIFIED');
    const effects = await stack.effects();
    expect(effects.charges[reference].count).toBe(1);
    expect(effects.duplicates).toEqual([]);
  });

  it('a 2xx that comes back after the sweeper marked the send UNKNOWN is recorded: never proven absent, held instead', async () => {
    // The provider's read side lags far behind: reconciliation reads the charge as absent for the whole test.
    await stack.setFaults({ replica_lag_ms: 120_000 });
    try {
      const a = await pausedDispatcher({ TEST_PAUSE_AFTER_CALL_MS: '5000' });
      const reference = unique('late-ack');
      const created = await submit(stack, [charge(reference)]);
      const [opId] = await waitForMarkers(a, 'paused after call', 1);
      a.child.kill('SIGSTOP');
      // The lock runs out, the sweeper marks the SENT operation UNKNOWN; then the frozen worker's 2xx comes back.
      await waitForOp(stack, created.id, 'charge', (o) => o.status === 'UNKNOWN' || o.status === 'RECONCILING');
      a.child.kill('SIGCONT');
      await waitForLog(a, (l) => l.msg === 'late send outcome rejected by CAS' && l.operationId === opId);

      const execution = await settle(stack, created.id);
      const [op] = execution.operations;
      // Absent at every read, yet the provider said it took the charge: a person decides, nothing says "no effect".
      expect(op).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'STALE_REPLICA' });
      expect(op.acknowledged_at).toEqual(expect.any(String));
      const log = await events(stack, created.id);
      expectLegalHistory(log);
      expect(log.filter((e) => e.operation_id === opId && e.type === 'operation.acknowledged_late')).toHaveLength(1);
      expect(statusPath(log, opId)).not.toContain('FAILED');
      expect((await stack.effects()).charges[reference].count).toBe(1);
    } finally {
      await stack.setFaults({ replica_lag_ms: 0 });
    }
  });

  /**
   * An SMS whose dispatcher is frozen after its call until the sweeper has marked the send UNKNOWN — held for a human at
   * once, as an SMS cannot be read back. The dispatcher stays frozen (SIGSTOP) until `resumed`.
   */
  async function frozenHeldSms(clientRef: string) {
    const a = await pausedDispatcher({ TEST_PAUSE_AFTER_CALL_MS: '5000' });
    const created = await submit(stack, [sms(clientRef)]);
    const [opId] = await waitForMarkers(a, 'paused after call', 1);
    a.child.kill('SIGSTOP');
    await waitForOp(stack, created.id, 'notify', (o) => o.status === 'MANUAL_REVIEW');
    return { a, created, opId };
  }

  /**
   * The frozen dispatcher resumed: its late answer loses the compare-and-set. Waits for the event `type` that records
   * that answer; returns the execution's events.
   */
  async function resumed(a: RunningApp, executionId: string, opId: string, type: string) {
    a.child.kill('SIGCONT');
    await waitForLog(a, (l) => l.msg === 'late send outcome rejected by CAS' && l.operationId === opId);
    return waitFor(
      () => events(stack, executionId),
      (l) => l.some((e) => e.operation_id === opId && e.type === type),
      10_000,
      150,
    );
  }

  /** A person resolves the held send FAILED once it may be (nothing came back, no call could still land by the bound). */
  async function resolvedFailed(opId: string): Promise<void> {
    await waitForResolutionPermitted(stack, opId, 'FAILED');
    const failed = await http(stack.apiUrl, 'POST', `/v1/operations/${opId}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'FAILED', evidence: 'the provider dashboard shows nothing' },
    });
    expect(failed.status).toBe(200);
  }

  /**
   * A frozen held SMS (frozenHeldSms) resumed at once. Waits for the event `type` that records its late answer; the
   * history is checked legal. Returns the operation and those events.
   */
  async function lateAnswerToAHeldSms(clientRef: string, type: string) {
    const { a, created, opId } = await frozenHeldSms(clientRef);
    const log = await resumed(a, created.id, opId, type);
    expectLegalHistory(log);
    return { opId, late: log.filter((e) => e.operation_id === opId && e.type === type) };
  }

  it('a 2xx that comes back after the send was held for a human is recorded: a person cannot call it FAILED, nor retry it', async () => {
    // An SMS cannot be read back: the UNKNOWN the sweeper writes is held for a human at once, before the frozen worker's
    // 2xx comes back. The provider took the message; its word must be on file when a person decides.
    const clientRef = unique('late-ack-held');
    const { opId, late } = await lateAnswerToAHeldSms(clientRef, 'operation.acknowledged_late');
    expect(late).toHaveLength(1);
    const held = await getOperation(stack, opId);
    expect(held).toMatchObject({ status: 'MANUAL_REVIEW', acknowledged_at: expect.any(String) });
    expect(held.permitted_resolutions).toEqual(['VERIFIED']);
    // The obligation the hold wrote (before the 2xx came back) says so too.
    expect(held.recovery_obligation?.permitted_actions).toEqual(['VERIFIED']);

    const failed = await http(stack.apiUrl, 'POST', `/v1/operations/${opId}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'FAILED', evidence: 'the provider dashboard shows nothing' },
    });
    expect(failed.status).toBe(409);
    expect(failed.body).toMatchObject({ type: expect.stringContaining('effect-exists') });
    const retry = await http(stack.apiUrl, 'POST', `/v1/operations/${opId}/retry`, { key: DEMO.agent });
    expect(retry.status).toBe(409);
    expect((await getOperation(stack, opId)).status).toBe('MANUAL_REVIEW');
    expect((await stack.effects()).messages[clientRef].count).toBe(1);
  });

  it('a rejection that comes back after the send was held for a human is put in its history, not dropped', async () => {
    // The provider refuses the message, but the frozen worker's answer comes back after the sweeper marked the send
    // UNKNOWN (held at once: an SMS cannot be read back). The reviewer deciding the hold must see what the provider said.
    await stack.setFaults({ rules: [{ method: 'POST', path: '/v1/messages', fault: 'reject' }] });
    try {
      const clientRef = unique('late-reject-held');
      const { opId, late: rejected } = await lateAnswerToAHeldSms(clientRef, 'operation.rejected_late');
      expect(rejected).toHaveLength(1);
      expect(rejected[0].data).toMatchObject({ reason: 'CONNECTOR_REJECTED', detail: expect.any(String) });
      // It changes no status: the hold is the reviewer's to decide, with the provider's answer in front of them.
      expect((await getOperation(stack, opId)).status).toBe('MANUAL_REVIEW');
      expect((await stack.effects()).messages[clientRef]?.count ?? 0).toBe(0);
    } finally {
      await stack.setFaults({ rules: [] });
    }
  });

  it('a 2xx that comes back after a person resolved the send FAILED is recorded, and the FAILED is not retried', async () => {
    // The person decided on what they saw (nothing had come back, no call could still land by the bound); the frozen
    // worker's 2xx then says the message went out. FAILED is final, but a retry would send it a second time.
    const clientRef = unique('late-ack-failed');
    const { a, created, opId } = await frozenHeldSms(clientRef);
    await resolvedFailed(opId);
    const log = await resumed(a, created.id, opId, 'operation.acknowledged_late');
    expectLegalHistory(log);
    expect(statusPath(log, opId)).toEqual(['PREPARED', 'SENT', 'UNKNOWN', 'MANUAL_REVIEW', 'FAILED']);
    // The FAILED stays, but the operation no longer says "rejected, a retry is safe": the provider took the send.
    expect(await getOperation(stack, opId)).toMatchObject({
      status: 'FAILED',
      acknowledged_at: expect.any(String),
      commit: 'unknown',
      retry: 'forbidden',
    });
    // Nor does the execution's effects summary say "none": the message may have gone out.
    expect((await getExecution(stack, created.id)).effects).toMatchObject({
      summary: 'unknown',
      commit: { rejected: 0, unknown: 1 },
    });

    const retry = await http(stack.apiUrl, 'POST', `/v1/operations/${opId}/retry`, { key: DEMO.agent });
    expect(retry.status).toBe(409);
    expect(retry.body).toMatchObject({
      type: expect.stringContaining('effect-exists'),
      acknowledged_at: expect.any(String),
      current_status: 'FAILED',
    });
    expect((await stack.effects()).messages[clientRef].count).toBe(1);
  });

  it('a retry made before the 2xx of the send it retries came back is not sent after it: cancelled at once, never sent', async () => {
    // The person resolved the SMS FAILED (nothing had come back by the bound) and the agent retried it at once; the
    // retry waits for approval, shown to reviewers. The frozen worker's 2xx then says the first message went out: "no
    // effect, a retry is safe" no longer stands, and sending the retry would send the message a second time. The write
    // of that 2xx advances the retry's execution: the retry is cancelled then, no reviewer's decision awaited. (The
    // sweeper's advance of a quiet execution would come to it too, later: here it waits an hour, so only that write's
    // advance can.)
    for (const app of stack.running('reconciler')) await stack.kill(app, 'SIGKILL');
    await stack.startApp('reconciler', { STALE_EXECUTION_MS: '3600000' });
    const clientRef = unique('late-ack-retried');
    const { a, created, opId } = await frozenHeldSms(clientRef);
    await resolvedFailed(opId);
    const setRules = (approval_rules: unknown[]) =>
      http(stack.apiUrl, 'PUT', '/v1/admin/policy', { key: DEMO.admin, body: { approval_rules } });
    expect((await setRules([{ connector: 'sandbox.sms' }])).status).toBe(200);
    try {
      const retried = await http<{ operation: { id: string }; execution: { id: string } }>(
        stack.apiUrl,
        'POST',
        `/v1/operations/${opId}/retry`,
        { key: DEMO.agent },
      );
      expect(retried.status).toBe(201);
      const retry = retried.body.operation.id;
      const retryExecution = retried.body.execution.id;
      // Another dispatcher takes the retry's execution while the first is frozen: the retry is asked for approval
      // before the 2xx comes back.
      await stack.startApp('dispatcher');
      await waitForOp(stack, retryExecution, 'notify', (o) => o.approval?.state === 'requested');

      await resumed(a, created.id, opId, 'operation.acknowledged_late');
      expect(await getOperation(stack, opId)).toMatchObject({ status: 'FAILED', retry: 'forbidden' });

      // Cancelled with no decision made: the approval asked for was never given, and is withdrawn with it.
      const done = await waitForOp(stack, retryExecution, 'notify', (o) => o.status !== 'PREPARED');
      expect(done).toMatchObject({ id: retry, status: 'CANCELLED', attempt: 0, approval: { state: 'withdrawn' } });
      expect(done.failure).toMatchObject({ code: 'retry_refuted', retryable: false });
      // A reviewer's approval that comes after is refused: there is nothing left to approve.
      const approved = await http(stack.apiUrl, 'POST', `/v1/operations/${retry}/approval`, {
        key: DEMO.reviewer,
        body: { decision: 'approve', reason: 'checked by the test' },
      });
      expect(approved.status).toBe(409);
      expect(await getOperation(stack, retry)).toMatchObject({ status: 'CANCELLED', approval: { state: 'withdrawn' } });
      // Its retry would be cancelled at send as well: it shows so, and a retry of it is refused, nothing written.
      expect(done.retry).toBe('forbidden');
      const again = await http(stack.apiUrl, 'POST', `/v1/operations/${retry}/retry`, { key: DEMO.agent });
      expect(again.status).toBe(409);
      expect(again.body).toMatchObject({
        type: expect.stringContaining('effect-exists'),
        current_status: 'CANCELLED',
        retry: 'forbidden',
      });
      const [{ n }] = (await stack.db.dataSource.query(
        `SELECT count(*)::int AS n FROM operations WHERE retry_of = $1`,
        [retry],
      )) as { n: number }[];
      expect(n).toBe(0);
      expect((await stack.effects()).messages[clientRef].count).toBe(1);
      const log = await events(stack, retryExecution);
      expectLegalHistory(log);
      expect(statusPath(log, retry)).toEqual(['PREPARED', 'CANCELLED']);
      expect(log.filter((e) => e.type === 'approval.decided')).toEqual([]);
    } finally {
      expect((await setRules([])).status).toBe(200);
      // The next test gets a reconciler as configured for the suite (afterEach starts one).
      for (const app of stack.running('reconciler')) await stack.kill(app, 'SIGKILL');
    }
  }, 150_000);

  it('a retry that needs an approval, its chain contradicted before it was looked at, is cancelled: never asked', async () => {
    // A declined charge ends FAILED; the agent retries it while no dispatcher runs, and the tenant's policy asks an
    // approval of every charge. The provider's 2xx of the original then comes back late (written as the dispatcher
    // records it): "no effect exists" no longer stands, and the retry's send guard would refuse it whatever a reviewer
    // said. The lifecycle asks the chain first: the retry is cancelled at once, never shown to a reviewer.
    const d = await stack.startApp('dispatcher');
    const reference = unique('decline-chain-first');
    const created = await submit(stack, [charge(reference)]);
    const original = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'FAILED');
    await stack.kill(d, 'SIGKILL');
    const setRules = (approval_rules: unknown[]) =>
      http(stack.apiUrl, 'PUT', '/v1/admin/policy', { key: DEMO.admin, body: { approval_rules } });
    expect((await setRules([{ connector: 'sandbox.payments' }])).status).toBe(200);
    try {
      const retried = await http<{ operation: { id: string }; execution: { id: string } }>(
        stack.apiUrl,
        'POST',
        `/v1/operations/${original.id}/retry`,
        { key: DEMO.agent },
      );
      expect(retried.status).toBe(201);
      const retryExecution = retried.body.execution.id;
      await stack.db.dataSource.query(
        `UPDATE operations SET acknowledged_at = now() WHERE id = $1 AND status = 'FAILED'`,
        [original.id],
      );

      await stack.startApp('dispatcher');
      const done = await waitForOp(
        stack,
        retryExecution,
        'charge',
        (o) => o.status !== 'PREPARED' || o.approval?.state === 'requested',
      );
      expect(done).toMatchObject({ id: retried.body.operation.id, status: 'CANCELLED', attempt: 0, approval: null });
      expect(done.failure).toMatchObject({ code: 'retry_refuted', retryable: false });
      const log = await events(stack, retryExecution);
      expectLegalHistory(log);
      expect(log.filter((e) => e.type.startsWith('approval.'))).toEqual([]);
      expect(statusPath(log, done.id)).toEqual(['PREPARED', 'CANCELLED']);
      const cancel = log.find((e) => e.operation_id === done.id && e.to_status === 'CANCELLED')!;
      expect(cancel.data).toMatchObject({ cause: 'retry_refuted', retry_of: original.id });
      expect((await stack.effects()).charges[reference]?.count ?? 0).toBe(0);
    } finally {
      expect((await setRules([])).status).toBe(200);
    }
  });

  it('a retry approved and on its way to be sent when the contradiction of its chain lands: one outcome, never sent', async () => {
    // A reviewer approved the retry; its sender waits just before the SENT statement (the test-only pause) when the
    // provider's 2xx of the original is recorded (as the dispatcher records it). Another dispatcher's advance of the
    // execution cancels the retry (retry_refuted) meanwhile; the paused sender's SENT statement then finds it no longer
    // PREPARED. Exactly one outcome, and no send.
    const a = await pausedDispatcher({ TEST_PAUSE_BEFORE_SENT_MS: '60000' });
    const reference = unique('decline-approve-race');
    const created = await submit(stack, [charge(reference)]);
    const [originalId] = await waitForMarkers(a, 'paused before SENT', 1);
    a.child.kill('SIGUSR2');
    await waitForOp(stack, created.id, 'charge', (o) => o.status === 'FAILED');
    const chargesBefore = (await stack.effects()).charges[reference]?.count ?? 0;
    const setRules = (approval_rules: unknown[]) =>
      http(stack.apiUrl, 'PUT', '/v1/admin/policy', { key: DEMO.admin, body: { approval_rules } });
    expect((await setRules([{ connector: 'sandbox.payments' }])).status).toBe(200);
    try {
      const retried = await http<{ operation: { id: string }; execution: { id: string } }>(
        stack.apiUrl,
        'POST',
        `/v1/operations/${originalId}/retry`,
        { key: DEMO.agent },
      );
      expect(retried.status).toBe(201);
      const retry = retried.body.operation.id;
      const retryExecution = retried.body.execution.id;
      await waitForOp(stack, retryExecution, 'charge', (o) => o.approval?.state === 'requested');
      const approved = await http(stack.apiUrl, 'POST', `/v1/operations/${retry}/approval`, {
        key: DEMO.reviewer,
        body: { decision: 'approve', reason: 'checked by the test' },
      });
      expect(approved.status).toBe(200);
      await waitFor(
        async () => markedOperations(a, 'paused before SENT'),
        (ids) => ids.includes(retry),
        30_000,
        20,
      );

      await stack.db.dataSource.query(
        `UPDATE operations SET acknowledged_at = now() WHERE id = $1 AND status = 'FAILED'`,
        [originalId],
      );
      await stack.startApp('dispatcher');
      const done = await waitForOp(stack, retryExecution, 'charge', (o) => o.status !== 'PREPARED');
      expect(done).toMatchObject({ id: retry, status: 'CANCELLED', attempt: 0 });
      expect(done.failure).toMatchObject({ code: 'retry_refuted', retryable: false });
      // The paused sender goes on: its SENT statement refuses, nothing is sent, nothing else is written.
      const linesBefore = logLines(a).length;
      a.child.kill('SIGUSR2');
      await waitFor(
        async () => logLines(a).slice(linesBefore),
        (lines) => lines.some((l) => l.operationId === retry && l.msg === 'dispatch'),
        30_000,
        20,
      );
      const log = await events(stack, retryExecution);
      expectLegalHistory(log);
      expect(statusPath(log, retry)).toEqual(['PREPARED', 'CANCELLED']);
      expect(log.filter((e) => e.operation_id === retry && e.to_status === 'CANCELLED')).toHaveLength(1);
      expect(await getOperation(stack, retry)).toMatchObject({ status: 'CANCELLED', attempt: 0, sent_at: null });
      expect((await stack.effects()).charges[reference]?.count ?? 0).toBe(chargesBefore);
    } finally {
      expect((await setRules([])).status).toBe(200);
    }
  }, 150_000);

  it('SIGSTOP after SENT past the job lock; SIGCONT: the worker wakes too late and does not call', async () => {
    const a = await pausedDispatcher({ TEST_PAUSE_AFTER_SENT_MS: '5000' });
    const reference = unique('stop-sent');
    const created = await submit(stack, [charge(reference)]);
    const [opId] = await waitForMarkers(a, 'paused after SENT', 1);
    a.child.kill('SIGSTOP');
    await stack.startApp('dispatcher');
    await waitForOp(stack, created.id, 'charge', (o) => o.status === 'FAILED');
    a.child.kill('SIGCONT');
    await waitForLog(a, (l) => String(l.msg).includes('woke up too late') && l.operationId === opId);

    const execution = await settle(stack, created.id);
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    const path = statusPath(log, opId);
    expect(path.slice(0, 4)).toEqual(['PREPARED', 'SENT', 'UNKNOWN', 'RECONCILING']);
    expect(path[path.length - 1]).toBe('FAILED');
    expect(execution.operations[0].evidence).toMatchObject({ found: false });
    expect((await stack.effects()).charges[reference]).toBeUndefined();
  });

  it('graceful SIGTERM: the in-flight send finishes and records its outcome, no new work is taken, exit 0', async () => {
    // The send in a dispatch job (the advance job's own send is the next test).
    const a = await pausedDispatcher({ TEST_PAUSE_AFTER_CALL_MS: '3000', SEND_IN_ADVANCE: 'false' });
    const reference = unique('sigterm');
    const created = await submit(stack, [charge(reference)]);
    const [opId] = await waitForMarkers(a, 'paused after call', 1);
    a.child.kill('SIGTERM');
    // The executions worker has no active job: it closes at once, while the send is still in flight.
    await waitFor(
      async () => logLines(a).some((l) => l.msg?.toString().startsWith('worker closed') && l.queue === 'executions'),
      (seen) => seen,
      10_000,
      20,
    );
    expect(a.child.exitCode).toBeNull();
    // Submitted while the dispatcher drains: it must be left for the next dispatcher, not started by this one.
    const later = await submit(stack, [charge(unique('after-sigterm'))]);
    const code = await a.exited;
    expect(code).toBe(0);
    expect((await events(stack, later.id)).map((e) => e.type)).toEqual(['execution.created']);
    // Recorded by the stopping process itself, before it exited (the reconciler may have verified it since).
    const log = await events(stack, created.id);
    expect(statusPath(log, opId).slice(0, 3)).toEqual(['PREPARED', 'SENT', 'ACKNOWLEDGED']);
    expect(statusPath(log, opId)).not.toContain('UNKNOWN');
    expect(logLines(a).some((l) => l.msg === 'in-flight sends drained')).toBe(true);

    await stack.startApp('dispatcher');
    const execution = await settle(stack, created.id);
    expect(execution.operations[0].status).toBe('VERIFIED');
    expect((await settle(stack, later.id)).operations[0].status).toBe('VERIFIED');
    expect(statusPath(await events(stack, created.id), opId)).toEqual(['PREPARED', 'SENT', 'ACKNOWLEDGED', 'VERIFIED']);
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });

  it('graceful SIGTERM during a send in the advance job: it finishes and records its outcome, exit 0', async () => {
    const a = await pausedDispatcher({ TEST_PAUSE_AFTER_CALL_MS: '3000' });
    const reference = unique('sigterm-advance');
    const created = await submit(stack, [charge(reference)]);
    const [opId] = await waitForMarkers(a, 'paused after call', 1);
    a.child.kill('SIGTERM');
    expect(await a.exited).toBe(0);
    // Recorded by the stopping process itself, before it exited.
    const log = await events(stack, created.id);
    expect(statusPath(log, opId).slice(0, 3)).toEqual(['PREPARED', 'SENT', 'ACKNOWLEDGED']);
    expect(statusPath(log, opId)).not.toContain('UNKNOWN');
    expect(logLines(a).some((l) => l.msg === 'dispatch' && l.operationId === opId && l.outcome === 'sent')).toBe(true);

    await stack.startApp('dispatcher');
    expect((await settle(stack, created.id)).operations[0].status).toBe('VERIFIED');
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });
});
