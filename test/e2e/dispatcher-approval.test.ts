import { JobName, QueueName } from '@verity/queues';
import { DEMO, DEMO_SANDBOX_ACCOUNT, Stack, freePort, waitFor } from '../support/stack';
import { charge, http, sms, unique } from '../support/http';
import {
  Event,
  Op,
  events,
  expectLegalHistory,
  getExecution,
  getOperation,
  logLines,
  settle,
  stackQueue,
  statusPath,
  submit,
  waitForOp,
  waitForApprovalRequest,
} from './dispatcher-helpers';

/**
 * Approvals: the operation waits (execution waiting_for_approval), a reviewer decides, and the grant is
 * re-validated at dispatch — an expired grant (stale authority) or a source that changed since (stale native
 * baseline) sends it back for approval. A decision that arrives before the operation starts waiting is kept.
 */
describe('dispatcher: approvals', () => {
  let stack: Stack;
  /** A second API whose grants expire at once (APPROVAL_TTL_MS is read where the grant is written). */
  let shortGrantApi = '';

  beforeAll(async () => {
    stack = await Stack.start({ label: 'dapproval' });
    const port = await freePort();
    await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1', APPROVAL_TTL_MS: '1' });
    shortGrantApi = `http://127.0.0.1:${port}`;
  });
  afterAll(async () => stack?.stop());

  async function decide(opId: string, decision: 'approve' | 'deny', apiUrl = stack.apiUrl) {
    const res = await http<Op>(apiUrl, 'POST', `/v1/operations/${opId}/approval`, {
      key: DEMO.reviewer,
      body: { decision, reason: `test ${decision}` },
    });
    expect(res.status).toBe(200);
    return res.body;
  }

  const waitForRequest = (executionId: string, times = 1) => waitForApprovalRequest(stack, executionId, times);

  /**
   * A charge that waits for approval (its reference `unique(prefix)`), then charged by someone else (another amount,
   * 999) after the reviewer saw {charged: false}, then approved: the grant's baseline is stale.
   */
  async function approvedAfterAChargeElsewhere(prefix: string) {
    const reference = unique(prefix);
    const created = await submit(stack, [charge(reference, { requires_approval: true })]);
    const { execution } = await waitForRequest(created.id);
    const opId = execution.operations[0].id;
    const direct = await stack.sandbox('/v1/charges', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': unique('elsewhere'), ...DEMO_SANDBOX_ACCOUNT },
      body: JSON.stringify({ amount: 999, currency: 'EUR', reference }),
    });
    expect(direct.status).toBe(201);
    await decide(opId, 'approve');
    return { reference, created, opId };
  }

  const types = (log: Event[]) =>
    log.filter((e) => e.type.startsWith('approval.') || e.to_status === 'SENT').map((e) => e.to_status ?? e.type);

  /** The `types` of a decision withdrawn as `stale` (approval.stale_…) and asked for again, then decided. */
  const askedAgain = (stale: string) => [
    'approval.requested',
    'approval.decided',
    stale,
    'approval.requested',
    'approval.decided',
  ];

  it('approve: the operation waits for approval, then is sent once and verified', async () => {
    const reference = unique('appr-ok');
    const created = await submit(stack, [charge(reference, { requires_approval: true })]);
    const { execution } = await waitForRequest(created.id);
    const opId = execution.operations[0].id;
    expect(execution.operations[0].status).toBe('PREPARED');
    expect((await stack.effects()).charges[reference]).toBeUndefined();

    const decided = await decide(opId, 'approve');
    expect(decided.approval).toMatchObject({ state: 'granted', decided_by: expect.any(String) });
    const done = await settle(stack, created.id);
    expect(done.operations[0].status).toBe('VERIFIED');
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(types(log)).toEqual(['approval.requested', 'approval.decided', 'SENT']);
    expect(log.find((e) => e.type === 'approval.requested')!.data.policy).toBe('requires_approval');
    expect(log.find((e) => e.type === 'approval.decided')!.data).toMatchObject({ decision: 'approve' });
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });

  it('deny: the operation is CANCELLED, its dependents too, nothing is sent', async () => {
    const reference = unique('appr-deny');
    const clientRef = unique('appr-deny-sms');
    const created = await submit(stack, [
      charge(reference, { requires_approval: true }),
      sms(clientRef, { depends_on: ['charge'] }),
    ]);
    const { execution } = await waitForRequest(created.id);
    await decide(execution.operations[0].id, 'deny');
    const done = await settle(stack, created.id);
    expect(done.operations.map((o) => o.status)).toEqual(['CANCELLED', 'CANCELLED']);
    expect(done.status).toBe('completed');
    expect(done.effects.summary).toBe('none');
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(log.find((e) => e.type === 'approval.decided')!.data).toMatchObject({ decision: 'deny' });
    expect(
      log.find((e) => e.operation_id === done.operations[1].id && e.to_status === 'CANCELLED')!.data,
    ).toMatchObject({ cause: 'dependency_not_done', dependency: 'charge' });
    const effects = await stack.effects();
    expect(effects.charges[reference]).toBeUndefined();
    expect(effects.messages[clientRef]).toBeUndefined();
  });

  it('expired grant (stale authority): back to waiting for approval, sent only after a fresh grant', async () => {
    const reference = unique('appr-expired');
    const created = await submit(stack, [charge(reference, { requires_approval: true })]);
    const { execution } = await waitForRequest(created.id);
    const opId = execution.operations[0].id;
    await decide(opId, 'approve', shortGrantApi);

    const again = await waitForRequest(created.id, 2);
    expect(again.execution.operations[0].status).toBe('PREPARED');
    const stale = again.log.find((e) => e.type === 'approval.stale_authority')!;
    expect(stale).toBeDefined();
    expect(stale.data.previous_grant).toMatchObject({ expires_at: expect.any(String) });
    expect((await stack.effects()).charges[reference]).toBeUndefined();

    await decide(opId, 'approve');
    const done = await settle(stack, created.id);
    expect(done.operations[0].status).toBe('VERIFIED');
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(types(log)).toEqual([...askedAgain('approval.stale_authority'), 'SENT']);
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });

  it('changed baseline (stale native baseline): a charge appeared since approval, so it goes back for approval', async () => {
    const { reference, created, opId } = await approvedAfterAChargeElsewhere('appr-baseline');

    const again = await waitForRequest(created.id, 2);
    const stale = again.log.find((e) => e.type === 'approval.stale_baseline')!;
    expect(stale.data).toMatchObject({
      baseline_at_grant: { charged: false },
      baseline_now: { charged: true, amount: 999 },
    });
    await decide(opId, 'deny');
    const done = await settle(stack, created.id);
    expect(done.operations[0].status).toBe('CANCELLED');
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(types(log)).toEqual(askedAgain('approval.stale_baseline'));
    const effects = await stack.effects();
    expect(effects.charges[reference]).toMatchObject({ count: 1, amounts: [999] });
  });

  it('changed baseline, approved again on the source as it is now: it is sent, not withdrawn as stale again', async () => {
    const { created, opId } = await approvedAfterAChargeElsewhere('appr-rebaseline');
    await waitForRequest(created.id, 2);
    // The reviewer approves the request asked for again, on the source as it is now ({charged: true, amount: 999, …}),
    // which nothing changes any more. Its baseline, kept as jsonb, comes back with its members in another order.
    await decide(opId, 'approve');
    const log = await waitFor(
      () => events(stack, created.id),
      (l) => l.some((e) => e.to_status === 'SENT') || l.filter((e) => e.type === 'approval.stale_baseline').length > 1,
      30_000,
      100,
    );
    expectLegalHistory(log);
    expect(types(log)).toEqual([...askedAgain('approval.stale_baseline'), 'SENT']);
  });

  it('early decision: an approval given before planning is kept, not asked again', async () => {
    for (const d of stack.running('dispatcher')) await stack.kill(d, 'SIGTERM');
    const reference = unique('appr-early');
    const created = await submit(stack, [charge(reference, { requires_approval: true })]);
    const opId = created.operations[0].id;
    expect(created.status).toBe('created');
    await decide(opId, 'approve');
    await stack.startApp('dispatcher');

    const done = await settle(stack, created.id);
    expect(done.operations[0].status).toBe('VERIFIED');
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(types(log)).toEqual(['approval.decided', 'SENT']);
    const decidedAt = log.find((e) => e.type === 'approval.decided')!.seq;
    const planning = log.find((e) => e.to_status === 'planning')!.seq;
    expect(decidedAt).toBeLessThan(planning);
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });

  it('an early denial is kept too: cancelled without ever being asked', async () => {
    for (const d of stack.running('dispatcher')) await stack.kill(d, 'SIGTERM');
    const reference = unique('appr-early-deny');
    const created = await submit(stack, [charge(reference, { requires_approval: true })]);
    await decide(created.operations[0].id, 'deny');
    await stack.startApp('dispatcher');
    const done = await settle(stack, created.id);
    expect(done.operations[0].status).toBe('CANCELLED');
    expect(types(await events(stack, created.id))).toEqual(['approval.decided']);
  });

  it('tenant policy: a payment above the tenant threshold needs approval without the flag', async () => {
    await stack.db.dataSource.query(
      `UPDATE tenants SET settings = settings || '{"approvalAmountAbove": 5000}'::jsonb WHERE id = 'demo'`,
    );
    try {
      const small = unique('policy-small');
      const large = unique('policy-large');
      const created = await submit(stack, [
        charge(small, { key: 'small' }),
        charge(large, { key: 'large', params: { amount: 6000, currency: 'EUR', reference: large } }),
      ]);
      const small1 = await waitForOp(stack, created.id, 'small', (o) => o.status === 'VERIFIED');
      expect(small1.approval).toBeNull();
      const waiting = await waitForOp(stack, created.id, 'large', (o) => o.approval?.state === 'requested');
      expect(waiting.status).toBe('PREPARED');
      const log = await events(stack, created.id);
      expect(log.find((e) => e.type === 'approval.requested')!.data.policy).toBe('tenant_policy');
      await decide(waiting.id, 'approve');
      const done = await settle(stack, created.id);
      expect(done.operations.map((o) => o.status)).toEqual(['VERIFIED', 'VERIFIED']);
    } finally {
      await stack.db.dataSource.query(
        `UPDATE tenants SET settings = settings - 'approvalAmountAbove' WHERE id = 'demo'`,
      );
    }
  });

  it('a request asked for under a rule that is then removed is still owed its decision: no send refused over and over', async () => {
    const policy = (approval_rules: unknown[]) =>
      http(stack.apiUrl, 'PUT', '/v1/admin/policy', { key: DEMO.admin, body: { approval_rules } });
    expect((await policy([{ connector: 'sandbox.payments' }])).status).toBe(200);
    const queue = stackQueue(stack, QueueName.EXECUTIONS);
    try {
      const reference = unique('rule-removed');
      const created = await submit(stack, [charge(reference)]);
      const { execution } = await waitForRequest(created.id);
      const op = execution.operations[0];
      expect((await policy([])).status).toBe(200);
      // An advance of the execution, as the sweeper or a duplicate enqueues one, waited for until it finished.
      const jobId = unique('advance');
      await queue.add(JobName.ADVANCE_EXECUTION, { executionId: created.id }, { jobId });
      await waitFor(
        async () => (await queue.getJob(jobId))?.getState(),
        (state) => state === 'completed' || state === 'failed',
      );
      expect(await (await queue.getJob(jobId))!.getState()).toBe('completed');
      // The request stands: the execution still waits for it, and no send was tried (each would have been refused).
      expect((await getExecution(stack, created.id)).status).toBe('waiting_for_approval');
      expect(await getOperation(stack, op.id)).toMatchObject({ status: 'PREPARED', attempt: 0 });
      const refused = stack
        .running('dispatcher')
        .flatMap((app) => logLines(app))
        .filter((line) => line.msg === 'dispatch refused by the send guard' && line.operationId === op.id);
      expect(refused).toEqual([]);
      await decide(op.id, 'approve');
      expect((await settle(stack, created.id)).operations[0].status).toBe('VERIFIED');
      expect((await stack.effects()).charges[reference].count).toBe(1);
    } finally {
      await queue.close();
      await policy([]);
    }
  });

  it('every execution here moved only along legal transitions, and each reached waiting_for_approval or not as told', async () => {
    const rows = (await stack.db.dataSource.query(
      `SELECT DISTINCT to_status FROM events WHERE type = 'execution.status_changed'`,
    )) as { to_status: string }[];
    expect(rows.map((r) => r.to_status)).toEqual(expect.arrayContaining(['waiting_for_approval', 'completed']));
    const all = (await stack.db.dataSource.query(`SELECT id FROM executions`)) as { id: string }[];
    for (const { id } of all) expectLegalHistory(await events(stack, id));
    const paths = await Promise.all(
      all.map(async ({ id }) => {
        const log = await events(stack, id);
        return log
          .filter((e) => e.type === 'operation.status_changed')
          .map((e) => e.operation_id!)
          .filter((v, i, a) => a.indexOf(v) === i)
          .map((opId) => statusPath(log, opId));
      }),
    );
    // No operation was ever sent twice.
    for (const ops of paths) for (const p of ops) expect(p.filter((s) => s === 'SENT').length).toBeLessThanOrEqual(1);
  });
});
