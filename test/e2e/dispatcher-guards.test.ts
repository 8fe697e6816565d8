import { JobName, JobProducer, QueueName } from '@verity/queues';
import { DEMO, METRICS_TOKEN, Stack, waitFor } from '../support/stack';
import { eventTransactions } from '../support/event-transactions';
import { charge, http, sms, unique } from '../support/http';
import {
  Event,
  Op,
  events,
  expectLegalHistory,
  getExecution,
  getOperation,
  resetSandbox,
  settle,
  statusPath,
  submit,
  waitForOp,
} from './dispatcher-helpers';

/**
 * No blind or early sends (I15 in docs/contract.md), end to end with real processes:
 * - an irreversible charge whose expected_state cannot be read (the provider's reads fail) is not sent while the read
 *   fails; it is sent once the read succeeds and agrees, or held PREPARED → MANUAL_REVIEW (SOURCE_UNREACHABLE) when the
 *   retry budget runs out. The same for an approved charge whose baseline cannot be re-read at dispatch.
 * - `irreversible: false` on an irreversible connector is a 400 that writes nothing.
 * - dispatch jobs added straight to the queue (stray, hand-made, replayed) are refused by the SENT statement itself.
 */
describe('dispatcher: no blind or early sends', () => {
  let stack: Stack;
  let producer: JobProducer;
  /** PRECONDITION_READ_BUDGET of the stack (test/support/stack.ts TEST_TIMINGS). */
  const budget = 6;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'dguards', env: { PRECONDITION_READ_BUDGET: String(budget) } });
    ({ producer } = await stack.queues());
  });
  afterAll(async () => {
    await stack?.stop();
  });
  afterEach(async () => resetSandbox(stack));

  const unavailable = (log: Event[], opId: string) =>
    log.filter((e) => e.type === 'context.unavailable' && e.operation_id === opId);

  /** Until the operation's context read has failed `n` times (each failed read is one event). */
  async function failedReads(executionId: string, opId: string, n: number): Promise<Event[]> {
    return waitFor(
      () => events(stack, executionId),
      (log) => unavailable(log, opId).length >= n,
      30_000,
      100,
    );
  }

  async function decide(opId: string, decision: 'approve' | 'deny') {
    const res = await http<Op>(stack.apiUrl, 'POST', `/v1/operations/${opId}/approval`, {
      key: DEMO.reviewer,
      body: { decision, reason: `test ${decision}` },
    });
    expect(res.status).toBe(200);
  }

  describe('an unreadable expected_state', () => {
    it('is not sent while the read fails; sent once and VERIFIED when the read recovers within the budget', async () => {
      await stack.setFaults({ read_fault: 'unavailable' });
      const reference = unique('g-recover');
      const created = await submit(stack, [charge(reference, { expected_state: { charged: false } })]);
      const opId = created.operations[0].id;

      const log = await failedReads(created.id, opId, 2);
      // Two failed reads, and still nothing at the provider: the operation waits, unsent, in PREPARED.
      expect((await stack.effects()).charges[reference]).toBeUndefined();
      expect(await getOperation(stack, opId)).toMatchObject({ status: 'PREPARED', attempt: 0 });
      expect(unavailable(log, opId)[1].data).toMatchObject({
        precondition: 'expected_state',
        failed_reads: 2,
        next_read_at: expect.any(String),
      });
      expect(log.some((e) => e.operation_id === opId && e.to_status === 'SENT')).toBe(false);

      await stack.setFaults({ read_fault: null });
      const execution = await settle(stack, created.id);
      expect(execution.operations[0]).toMatchObject({ status: 'VERIFIED', attempt: 1 });
      expect((await stack.effects()).charges[reference].count).toBe(1);
      const after = await events(stack, created.id);
      expectLegalHistory(after);
      expect(statusPath(after, opId)).toEqual(['PREPARED', 'SENT', 'ACKNOWLEDGED', 'VERIFIED']);
      const read = after.find((e) => e.type === 'context.read' && e.operation_id === opId)!;
      expect(read.data).toMatchObject({ state: { charged: false } });
      // Every failed read came before the read that agreed, and that before the send.
      const sent = after.find((e) => e.operation_id === opId && e.to_status === 'SENT')!;
      expect(Math.max(...unavailable(after, opId).map((e) => e.seq))).toBeLessThan(read.seq);
      expect(read.seq).toBeLessThan(sent.seq);
    });

    it('is held PREPARED → MANUAL_REVIEW (SOURCE_UNREACHABLE, with an obligation) when the budget runs out; nothing sent', async () => {
      await stack.setFaults({ read_fault: 'unavailable' });
      const reference = unique('g-exhaust');
      const created = await submit(stack, [charge(reference, { expected_state: { charged: false } })]);
      const execution = await settle(stack, created.id);
      const [op] = execution.operations;
      expect(op).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'SOURCE_UNREACHABLE', attempt: 0 });
      expect(op.recovery_obligation).toMatchObject({
        reason: 'SOURCE_UNREACHABLE',
        permitted_actions: ['SENT', 'CANCELLED'],
      });
      expect(op.evidence).toMatchObject({ precondition: 'expected_state', failed_reads: budget });
      const log = await events(stack, created.id);
      expectLegalHistory(log);
      expect(statusPath(log, op.id)).toEqual(['PREPARED', 'MANUAL_REVIEW']);
      expect(unavailable(log, op.id)).toHaveLength(budget);
      expect(unavailable(log, op.id).at(-1)!.data).toMatchObject({ failed_reads: budget, held: 'budget' });
      // The last failed read is written with the hold it explains (its data says "held"): one transaction.
      const written = await eventTransactions(stack.db, created.id);
      const heldMove = log.find((e) => e.operation_id === op.id && e.to_status === 'MANUAL_REVIEW')!;
      expect(written.get(unavailable(log, op.id).at(-1)!.id)).toBe(written.get(heldMove.id));
      expect((await stack.effects()).charges[reference]).toBeUndefined();
    });
  });

  it('an irreversible SMS with an expected_state its connector cannot read is never sent; held when the budget runs out', async () => {
    const clientRef = unique('g-unreadable-sms');
    const created = await submit(stack, [sms(clientRef, { expected_state: { opted_in: true } })]);
    const execution = await settle(stack, created.id);
    const [op] = execution.operations;
    expect(op).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'SOURCE_UNREACHABLE', attempt: 0 });
    expect(op.evidence).toMatchObject({ precondition: 'expected_state', failed_reads: budget });
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(statusPath(log, op.id)).toEqual(['PREPARED', 'MANUAL_REVIEW']);
    expect(unavailable(log, op.id)).toHaveLength(budget);
    expect((await stack.effects()).messages[clientRef]).toBeUndefined();
  });

  describe('an approved charge whose baseline cannot be re-read at dispatch', () => {
    async function approvedWhileUnreadable(label: string) {
      const reference = unique(label);
      const created = await submit(stack, [charge(reference, { requires_approval: true })]);
      const waiting = await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
      // The reviewer's baseline (internal, not on the wire) was read before the fault.
      const [row] = (await stack.db.dataSource.query(
        `SELECT approval->'baseline' AS baseline FROM operations WHERE id = $1`,
        [waiting.id],
      )) as { baseline: unknown }[];
      expect(row.baseline).toEqual({ charged: false });
      await stack.setFaults({ read_fault: 'unavailable' });
      await decide(waiting.id, 'approve');
      return { reference, executionId: created.id, opId: waiting.id };
    }

    it('is not sent while the baseline cannot be read; sent once when it can again and still agrees', async () => {
      const { reference, executionId, opId } = await approvedWhileUnreadable('g-baseline-recover');
      const log = await failedReads(executionId, opId, 2);
      expect(unavailable(log, opId)[0].data).toMatchObject({ precondition: 'approval_baseline' });
      expect((await stack.effects()).charges[reference]).toBeUndefined();
      expect(await getOperation(stack, opId)).toMatchObject({ status: 'PREPARED', attempt: 0 });

      await stack.setFaults({ read_fault: null });
      const execution = await settle(stack, executionId);
      expect(execution.operations[0]).toMatchObject({ status: 'VERIFIED', attempt: 1 });
      expect((await stack.effects()).charges[reference].count).toBe(1);
      const after = await events(stack, executionId);
      expectLegalHistory(after);
      expect(statusPath(after, opId)).toEqual(['PREPARED', 'SENT', 'ACKNOWLEDGED', 'VERIFIED']);
    });

    it('is held in MANUAL_REVIEW (SOURCE_UNREACHABLE) when the baseline stays unreadable; nothing sent', async () => {
      const { reference, executionId, opId } = await approvedWhileUnreadable('g-baseline-exhaust');
      const execution = await settle(stack, executionId);
      expect(execution.operations[0]).toMatchObject({
        status: 'MANUAL_REVIEW',
        terminal_reason: 'SOURCE_UNREACHABLE',
        attempt: 0,
      });
      const log = await events(stack, executionId);
      expectLegalHistory(log);
      expect(statusPath(log, opId)).toEqual(['PREPARED', 'MANUAL_REVIEW']);
      expect(unavailable(log, opId)).toHaveLength(budget);
      expect((await stack.effects()).charges[reference]).toBeUndefined();
    });
  });

  it('irreversible: false on sandbox.payments is a 400 naming the field and rule irreversible_floor; nothing written', async () => {
    const count = async () =>
      Number(((await stack.db.dataSource.query(`SELECT count(*) AS n FROM executions`)) as { n: string }[])[0].n);
    const before = await count();
    const reference = unique('g-floor');
    const res = await http<{ status: number; errors?: { field: string; rule: string }[] }>(
      stack.apiUrl,
      'POST',
      '/v1/executions',
      {
        key: DEMO.agent,
        body: { agent_id: 'g', intent: 'floor', operations: [charge(reference, { irreversible: false })] },
      },
    );
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toContain('application/problem+json');
    expect(res.body.errors).toEqual([
      expect.objectContaining({ field: 'operations[0].irreversible', rule: 'irreversible_floor' }),
    ]);
    expect(await count()).toBe(before);
    expect((await stack.effects()).charges[reference]).toBeUndefined();
  });

  describe('dispatch jobs added straight to the queue', () => {
    /** Adds a `dispatch-operation` job the way a hand (Bull Board) or a replay would, and waits for it to finish. */
    async function strayDispatch(operationId: string): Promise<string> {
      const jobId = unique('stray');
      const [{ execution_id: executionId }] = (await stack.db.dataSource.query(
        `SELECT execution_id FROM operations WHERE id = $1`,
        [operationId],
      )) as { execution_id: string }[];
      await producer.enqueue(JobName.DISPATCH_OPERATION, { operationId, executionId }, { jobId });
      const queue = producer.queue(QueueName.DISPATCH);
      const job = await waitFor(
        async () => {
          const found = await queue.getJob(jobId);
          return { found, state: found ? await found.getState() : 'missing' };
        },
        (j) => j.state === 'completed' || j.state === 'failed',
        20_000,
        50,
      );
      expect(job.state).toBe('completed');
      // Read again: the job object above may have been loaded just before it completed.
      return String((await queue.getJob(jobId))!.returnvalue);
    }

    async function snapshot(executionId: string, opId: string) {
      const op = await getOperation(stack, opId);
      const log = (await events(stack, executionId)).filter((e) => e.operation_id === opId);
      return { status: op.status, attempt: op.attempt, approval: op.approval?.state ?? null, events: log.length };
    }

    it('a dependency not done, an approval pending: refused by the SENT statement, nothing sent, nothing changed', async () => {
      const reference = unique('g-stray-charge');
      const clientRef = unique('g-stray-sms');
      const created = await submit(stack, [
        charge(reference, { requires_approval: true }),
        sms(clientRef, { depends_on: ['charge'] }),
      ]);
      const chargeOp = await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
      await waitFor(
        () => getExecution(stack, created.id),
        (e) => e.status === 'waiting_for_approval',
      );
      const smsOp = (await getExecution(stack, created.id)).operations.find((o) => o.key === 'notify')!;
      const before = {
        charge: await snapshot(created.id, chargeOp.id),
        sms: await snapshot(created.id, smsOp.id),
      };

      // The SMS whose charge is still waiting for approval (the attack of the issue), twice (a replay).
      for (let i = 0; i < 2; i += 1) {
        const result = await strayDispatch(smsOp.id);
        expect(result).toContain('refused by the send guard');
        expect(result).toContain('dependency_not_done');
      }
      // The charge itself, whose approval is pending.
      const result = await strayDispatch(chargeOp.id);
      expect(result).toContain('refused by the send guard');
      expect(result).toContain('approval_not_granted');

      const effects = await stack.effects();
      expect(effects.charges[reference]).toBeUndefined();
      expect(effects.messages[clientRef]).toBeUndefined();
      expect(await snapshot(created.id, chargeOp.id)).toEqual(before.charge);
      expect(await snapshot(created.id, smsOp.id)).toEqual(before.sms);

      // Counted by the dispatcher that refused them, on its own /metrics.
      const metrics = await http<string>(stack.running('dispatcher')[0].opsUrl!, 'GET', '/metrics', {
        key: METRICS_TOKEN,
      });
      expect(metrics.status).toBe(200);
      expect(metrics.text).toMatch(/verity_dispatch_refused_total\{reason="dependency_not_done"\} [1-9]/);
      expect(metrics.text).toMatch(/verity_dispatch_refused_total\{reason="approval_not_granted"\} [1-9]/);

      // The real path is unharmed: approved, the charge is sent once, then the SMS once.
      await decide(chargeOp.id, 'approve');
      const done = await settle(stack, created.id);
      expect(done.operations.map((o) => o.status)).toEqual(['VERIFIED', 'ACKNOWLEDGED']);
      const after = await stack.effects();
      expect(after.charges[reference].count).toBe(1);
      expect(after.messages[clientRef].count).toBe(1);

      // A replayed job after the send: refused too, still one effect each.
      expect(await strayDispatch(chargeOp.id)).toContain('status_moved');
      expect(await strayDispatch(smsOp.id)).toContain('status_moved');
      const final = await stack.effects();
      expect(final.charges[reference].count).toBe(1);
      expect(final.messages[clientRef].count).toBe(1);
      expectLegalHistory(await events(stack, created.id));
    });

    it('a cancelled execution: refused, nothing sent, nothing changed — also for an operation the cancel left PREPARED', async () => {
      // Cancelled through the API: its PREPARED operation became CANCELLED with it.
      const reference = unique('g-stray-cancelled');
      const created = await submit(stack, [charge(reference, { requires_approval: true })]);
      const op = await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
      const cancelled = await http(stack.apiUrl, 'POST', `/v1/executions/${created.id}/cancel`, {
        key: DEMO.agent,
        body: { reason: 'no longer wanted' },
      });
      expect(cancelled.status).toBe(200);
      const before = await snapshot(created.id, op.id);
      expect(before.status).toBe('CANCELLED');
      expect(await strayDispatch(op.id)).toContain('refused by the send guard');
      expect(await snapshot(created.id, op.id)).toEqual(before);

      // A cancelled execution whose operation is still PREPARED with a valid grant (the row as a racing cancel could
      // leave it for an instant, made by hand): only the execution's status stands between the job and a send.
      const reference2 = unique('g-stray-cancelled-prepared');
      const created2 = await submit(stack, [charge(reference2, { requires_approval: true })]);
      const op2 = await waitForOp(stack, created2.id, 'charge', (o) => o.approval?.state === 'requested');
      await waitFor(
        () => getExecution(stack, created2.id),
        (e) => e.status === 'waiting_for_approval',
      );
      await stack.db.dataSource.query(
        `UPDATE operations SET approval = approval || jsonb_build_object('state', 'granted', 'expires_at', $2::text)
         WHERE id = $1`,
        [op2.id, new Date(Date.now() + 600_000).toISOString()],
      );
      await stack.db.dataSource.query(`UPDATE executions SET status = 'cancelled' WHERE id = $1`, [created2.id]);
      const before2 = await snapshot(created2.id, op2.id);
      const result = await strayDispatch(op2.id);
      expect(result).toContain('refused by the send guard');
      expect(result).toContain('execution_not_running');
      expect(result).not.toContain('approval_not_granted');
      expect(await snapshot(created2.id, op2.id)).toEqual(before2);
      const effects = await stack.effects();
      expect(effects.charges[reference]).toBeUndefined();
      expect(effects.charges[reference2]).toBeUndefined();
    });
  });
});
