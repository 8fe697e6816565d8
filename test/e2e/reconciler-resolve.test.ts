import { createApiKey } from '@verity/persistence/api-keys';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, sms, unique } from '../support/http';
import {
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
  waitForResolutionPermitted,
} from './dispatcher-helpers';

const OTHER_REVIEWER = 'test-other-tenant-reviewer-key';

/**
 * Recovery obligations: every MANUAL_REVIEW operation carries one; POST /v1/operations/{id}/resolve accepts
 * only an action the status model permits, records who and when, and the execution continues. Obligations past their
 * due time are escalated by the sweeper (OBLIGATION_DUE_MS is short here).
 */
describe('reconciler: resolution of MANUAL_REVIEW and escalation', () => {
  let stack: Stack;
  beforeAll(async () => {
    // A send whose reads stay inconclusive is held after three reads rather than six: the hold, not how many reads it
    // took, is what these tests are about.
    stack = await Stack.start({ label: 'rresolve', env: { OBLIGATION_DUE_MS: '3000', RECONCILE_BUDGET: '3' } });
    await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo-other', role: 'reviewer', key: OTHER_REVIEWER });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => resetSandbox(stack));

  async function resolve(opId: string, status: string, key = DEMO.reviewer) {
    return http<Op & { type?: string; permitted_resolutions?: string[] }>(
      stack.apiUrl,
      'POST',
      `/v1/operations/${opId}/resolve`,
      { key, body: { status, evidence: `provider dashboard checked by the test: ${status}` } },
    );
  }

  /** A charge sent with `fault` on its POST while the provider's reads are down: held SOURCE_UNREACHABLE. */
  /**
   * A charge sent with `fault` on its POST (so the provider never acknowledged it) while its reads answer with
   * `readFault` (default: down): held for `reason` (default SOURCE_UNREACHABLE).
   */
  async function chargeHeldUnread(
    fault: 'drop_before_commit' | 'timeout_after_commit',
    readFault: 'unavailable' | 'field_missing' = 'unavailable',
    reason = 'SOURCE_UNREACHABLE',
  ) {
    await stack.setFaults({ rules: [{ method: 'POST', path: '/v1/charges', fault, count: 1 }], read_fault: readFault });
    const reference = unique(`rr-unread-${fault}`);
    const created = await submit(stack, [charge(reference)]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect(held).toMatchObject({ terminal_reason: reason, acknowledged_at: null });
    return { reference, created, held };
  }

  it('a permitted resolution (VERIFIED) is recorded with who and when, and the waiting dependent is dispatched', async () => {
    await stack.setFaults({ read_fault: 'amount_mismatch' });
    const reference = unique('rr-verified');
    const clientRef = unique('rr-verified-sms');
    const created = await submit(stack, [charge(reference), sms(clientRef, { depends_on: ['charge'] })]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect(held.terminal_reason).toBe('INTEGRITY_MISMATCH');
    await resetSandbox(stack);
    // The dependent waits for the human: nothing is sent meanwhile.
    const waiting = await waitFor(
      () => getExecution(stack, created.id),
      (e) => e.status === 'waiting_for_tool',
    );
    expect(waiting.operations[1].status).toBe('PREPARED');
    expect((await stack.effects()).messages[clientRef]).toBeUndefined();

    const res = await resolve(held.id, 'VERIFIED');
    expect(res.status).toBe(200);
    expect(res.body.status).toBe('VERIFIED');
    const execution = await settle(stack, created.id);
    expect(execution.status).toBe('completed');
    expect(execution.operations.map((o) => o.status)).toEqual(['VERIFIED', 'ACKNOWLEDGED']);
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    const resolution = log.find((e) => e.operation_id === held.id && e.to_status === 'VERIFIED')!;
    expect(resolution.from_status).toBe('MANUAL_REVIEW');
    expect(resolution.data).toMatchObject({
      actor: 'human',
      resolution: {
        status: 'VERIFIED',
        evidence: expect.stringContaining('dashboard'),
        by: expect.any(String),
        at: expect.any(String),
      },
    });
    const smsSent = log.find((e) => e.operation_id === execution.operations[1].id && e.to_status === 'SENT')!;
    expect(smsSent.seq).toBeGreaterThan(resolution.seq);
    expect((await stack.effects()).messages[clientRef].count).toBe(1);
  });

  it('a permitted resolution (FAILED) cancels the waiting dependent', async () => {
    await stack.setFaults({ rules: [{ method: 'POST', path: '/v1/messages', fault: 'drop_before_commit', count: 1 }] });
    const clientRef = unique('rr-failed-sms');
    const reference = unique('rr-failed-charge');
    const created = await submit(stack, [sms(clientRef), charge(reference, { depends_on: ['notify'] })]);
    const held = await waitForOp(stack, created.id, 'notify', (o) => o.status === 'MANUAL_REVIEW');
    await waitForResolutionPermitted(stack, held.id, 'FAILED');
    const res = await resolve(held.id, 'FAILED');
    expect(res.status).toBe(200);
    const execution = await settle(stack, created.id);
    expect(execution.operations.map((o) => o.status)).toEqual(['FAILED', 'CANCELLED']);
    expect(execution.effects.summary).toBe('none');
    expectLegalHistory(await events(stack, created.id));
    expect((await stack.effects()).charges[reference]).toBeUndefined();
  });

  it('a forbidden resolution answers 409 with the permitted actions; a settled operation cannot be resolved', async () => {
    await stack.setFaults({ read_fault: 'field_missing' });
    const created = await submit(stack, [charge(unique('rr-forbidden'))]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    // The hold's own read found the charge (without its status): a record of it is on file, so only VERIFIED remains.
    expect(held.recovery_obligation!.permitted_actions).toEqual(['VERIFIED']);
    for (const status of ['SENT', 'CANCELLED']) {
      const res = await resolve(held.id, status);
      expect(res.status).toBe(409);
      expect(res.headers.get('content-type')).toContain('application/problem+json');
      expect(res.body.permitted_resolutions).toEqual(['VERIFIED']);
    }
    expect((await getOperation(stack, held.id)).status).toBe('MANUAL_REVIEW');
    // FAILED would make a retry look safe, and the retry could charge again: refused with the record on file.
    const refused = await resolve(held.id, 'FAILED');
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({
      type: 'https://verity.dev/problems/effect-exists',
      read_back: { kind: 'stored', evidence: { record: { reference: expect.any(String) } } },
    });
    expect((await getOperation(stack, held.id)).status).toBe('MANUAL_REVIEW');
    expect((await resolve(held.id, 'VERIFIED')).status).toBe(200);
    // Now VERIFIED: no resolution applies any more.
    expect((await resolve(held.id, 'FAILED')).status).toBe(409);
    expect(statusPath(await events(stack, created.id), held.id).slice(-2)).toEqual(['MANUAL_REVIEW', 'VERIFIED']);
  });

  it.each([
    // The hold's own read found a record without its status: the record is on file.
    ['FIELD_MISSING', 'field_missing'],
    // The provider acknowledged the charge (its reads down since): its own word is the record on file.
    ['SOURCE_UNREACHABLE', 'unavailable'],
  ] as const)(
    'a sent charge held for %s with a record of it on file is never resolved FAILED, whatever a read shows',
    async (reason, heldBy) => {
      await stack.setFaults({ read_fault: heldBy });
      const reference = unique('rr-on-file');
      const created = await submit(stack, [charge(reference)]);
      const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
      expect(held.terminal_reason).toBe(reason);
      expect(await getOperation(stack, held.id)).toMatchObject({ permitted_resolutions: ['VERIFIED'] });
      // Even a source that answers without it (a replica that lost the record) does not undo what is on file.
      for (const readFault of ['unavailable', 'record_lost'] as const) {
        await stack.setFaults({ read_fault: readFault });
        const refused = await resolve(held.id, 'FAILED');
        expect(refused.status).toBe(409);
        expect(refused.body).toMatchObject({
          type: 'https://verity.dev/problems/effect-exists',
          read_back: { kind: 'stored' },
        });
      }
      const retried = await http(stack.apiUrl, 'POST', `/v1/operations/${held.id}/retry`, { key: DEMO.agent });
      expect(retried.status).toBe(409);
      expect((await getOperation(stack, held.id)).status).toBe('MANUAL_REVIEW');
      expect((await events(stack, created.id)).filter((e) => e.type === 'operation.resolved')).toEqual([]);
      expect((await stack.effects()).charges[reference].count).toBe(1);
    },
  );

  it('a record the hold found stays on file: a later "not there" refutes neither it nor a VERIFIED', async () => {
    // Never acknowledged (the answer lost), and the reconciler's reads found the charge without its status.
    const { reference, created, held } = await chargeHeldUnread(
      'timeout_after_commit',
      'field_missing',
      'FIELD_MISSING',
    );
    // Past the bound after which the lookup's "not there" would be the provider's word (send grace, the UNKNOWN after
    // the timeout, connector timeout and settle window: about 3.5 s after the send here).
    await waitFor(
      async () => Date.now(),
      (now) => now > Date.parse(held.sent_at!) + 5000,
      15_000,
      100,
    );
    // The replica then loses the record, after no call could still land: FAILED stays refused, and VERIFIED —
    // the only resolution left — is not refuted by the lookup's "not there".
    await stack.setFaults({ read_fault: 'record_lost' });
    expect((await resolve(held.id, 'FAILED')).body).toMatchObject({
      type: 'https://verity.dev/problems/effect-exists',
      read_back: { kind: 'stored' },
    });
    const verified = await resolve(held.id, 'VERIFIED');
    expect(verified.status).toBe(200);
    expect(verified.body.status).toBe('VERIFIED');
    expectLegalHistory(await events(stack, created.id));
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });

  it('a sent charge never acknowledged is not resolved FAILED while the source cannot be read; refused once it shows it', async () => {
    // Taken by the provider, the answer lost, reads down since: held SOURCE_UNREACHABLE, nothing on file.
    const { reference, held } = await chargeHeldUnread('timeout_after_commit');
    await waitForResolutionPermitted(stack, held.id, 'FAILED');
    // The source cannot be read when the reviewer decides: a FAILED would make a retry look safe, and the retry would
    // charge again. Not yet, rather than never.
    const refused = await resolve(held.id, 'FAILED');
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({
      type: 'https://verity.dev/problems/resolution-not-permitted',
      read_back: { kind: 'unreachable' },
    });
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(await getOperation(stack, held.id)).toMatchObject({
      status: 'MANUAL_REVIEW',
      permitted_resolutions: ['VERIFIED', 'FAILED'],
    });
    const retried = await http(stack.apiUrl, 'POST', `/v1/operations/${held.id}/retry`, { key: DEMO.agent });
    expect(retried.status).toBe(409);
    // Once the source answers, it shows the charge: FAILED is refused for good.
    await resetSandbox(stack);
    expect((await resolve(held.id, 'FAILED')).body).toMatchObject({
      type: 'https://verity.dev/problems/effect-exists',
      read_back: { kind: 'found' },
    });
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });

  it('a charge never made is not resolved VERIFIED while the provider answers that it does not exist', async () => {
    // Sent, no answer (the provider dropped the request before charging), reads down since: held SOURCE_UNREACHABLE.
    const { reference, created, held } = await chargeHeldUnread('drop_before_commit');
    const offered = (await getOperation(stack, held.id)).resolution_options!;
    expect(offered.find((o) => o.status === 'VERIFIED')).toMatchObject({
      permitted: true,
      check: 'read_back',
    });
    // The provider's reads are back, no call of it can still land, and its own lookup shows no such charge: "it
    // happened" would be a lie.
    await resetSandbox(stack);
    await waitForResolutionPermitted(stack, held.id, 'FAILED');
    const refused = await resolve(held.id, 'VERIFIED');
    expect(refused.status).toBe(409);
    expect(refused.headers.get('content-type')).toContain('application/problem+json');
    expect(refused.body).toMatchObject({
      type: 'https://verity.dev/problems/resolution-not-permitted',
      read_back: { kind: 'absent' },
      current_status: 'MANUAL_REVIEW',
    });
    expect(await getOperation(stack, held.id)).toMatchObject({ status: 'MANUAL_REVIEW', commit: 'unknown' });
    expect(refused.headers.get('retry-after')).toBeNull();
    expect((await events(stack, created.id)).filter((e) => e.type === 'operation.resolved')).toEqual([]);
    // What the source shows is what the reviewer may record.
    const failed = await resolve(held.id, 'FAILED');
    expect(failed.status).toBe(200);
    expect(failed.body).toMatchObject({ status: 'FAILED' });
    expect((await stack.effects()).charges[reference]).toBeUndefined();
    expectLegalHistory(await events(stack, created.id));
  });

  it('a VERIFIED the provider’s lookup cannot show yet is "not yet" until no call of it can still land', async () => {
    // Dropped before the provider charged, no verification asked for: held at once, well inside the time in which a
    // call of it could still land and show.
    await stack.setFaults({ rules: [{ method: 'POST', path: '/v1/charges', fault: 'drop_before_commit', count: 1 }] });
    const reference = unique('rr-not-yet');
    const created = await submit(stack, [charge(reference, { verification_method: '' })]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    const early = await resolve(held.id, 'VERIFIED');
    expect(early.status).toBe(409);
    expect(early.body).toMatchObject({
      type: 'https://verity.dev/problems/resolution-not-permitted',
      read_back: { kind: 'absent' },
      absence_evident_at: expect.any(String),
    });
    expect(early.body).toMatchObject({ detail: expect.stringContaining('not permitted yet') });
    expect(Number(early.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect((await getOperation(stack, held.id)).status).toBe('MANUAL_REVIEW');
    // From then on the lookup's answer is the provider's word: still nothing there, so refuted.
    await waitForResolutionPermitted(stack, held.id, 'FAILED');
    const late = await resolve(held.id, 'VERIFIED');
    expect(late.status).toBe(409);
    expect(late.body).toMatchObject({ detail: expect.stringContaining('does not exist') });
    expect(late.headers.get('retry-after')).toBeNull();
    expect((await events(stack, created.id)).filter((e) => e.type === 'operation.resolved')).toEqual([]);
    expect((await stack.effects()).charges[reference]).toBeUndefined();
  });

  it('a reviewer’s VERIFIED while the source cannot be read stands on the evidence, the read recorded beside it', async () => {
    // Sent, the answer lost after the charge was made, reads down since: held SOURCE_UNREACHABLE.
    const { reference, created, held } = await chargeHeldUnread('timeout_after_commit');
    // Still unreadable when the reviewer decides: the evidence stands, and the read is recorded beside it.
    const res = await resolve(held.id, 'VERIFIED');
    expect(res.status).toBe(200);
    expect(res.body.status).toBe('VERIFIED');
    const resolved = (await events(stack, created.id)).find((e) => e.type === 'operation.resolved')!;
    expect(resolved.data).toMatchObject({ status: 'VERIFIED', read_back: { kind: 'unreachable' } });
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });

  it('another tenant cannot resolve (404), an agent key cannot either (403)', async () => {
    await stack.setFaults({ read_fault: 'field_missing' });
    const created = await submit(stack, [charge(unique('rr-tenant'))]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect((await resolve(held.id, 'VERIFIED', OTHER_REVIEWER)).status).toBe(404);
    expect((await resolve(held.id, 'VERIFIED', DEMO.agent)).status).toBe(403);
    expect((await getOperation(stack, held.id)).status).toBe('MANUAL_REVIEW');
  });

  it('a never-sent operation held for a knowledge conflict: SENT releases it (sent once, verified)', async () => {
    const reference = unique('rr-release');
    const created = await submit(stack, [charge(reference, { expected_state: { charged: true } })]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect(held).toMatchObject({ terminal_reason: 'KNOWLEDGE_CONFLICT', attempt: 0 });
    expect(held.recovery_obligation!.permitted_actions).toEqual(['SENT', 'CANCELLED']);
    expect((await resolve(held.id, 'VERIFIED')).status).toBe(409);
    // Nothing was sent, so no effect can exist: FAILED is refused as a resolution this hold does not take, naming why
    // and what it takes — never as effect-exists, which once answered here with a read_back showing no charge.
    const failed = await resolve(held.id, 'FAILED');
    expect(failed.status).toBe(409);
    expect(failed.body).toMatchObject({
      type: 'https://verity.dev/problems/resolution-not-permitted',
      detail: expect.stringContaining('never sent'),
      current_status: 'MANUAL_REVIEW',
      permitted_resolutions: ['SENT', 'CANCELLED'],
    });
    expect(failed.body).not.toHaveProperty('read_back');
    expect((await getOperation(stack, held.id)).status).toBe('MANUAL_REVIEW');
    expect((await resolve(held.id, 'SENT')).status).toBe(200);

    const op = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'VERIFIED');
    expect(op.attempt).toBe(1);
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(statusPath(log, op.id)).toEqual(['PREPARED', 'MANUAL_REVIEW', 'SENT', 'ACKNOWLEDGED', 'VERIFIED']);
    expect(log.find((e) => e.to_status === 'SENT')!.data.actor).toBe('human');
    // The release is the reviewer's decision: one operation.resolved event (I13).
    expect(log.filter((e) => e.type === 'operation.resolved').map((e) => e.data.status)).toEqual(['SENT']);
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });

  it('a never-sent operation can be CANCELLED by the reviewer instead', async () => {
    const reference = unique('rr-cancel');
    const created = await submit(stack, [charge(reference, { expected_state: { charged: true } })]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect((await resolve(held.id, 'CANCELLED')).status).toBe(200);
    const execution = await settle(stack, created.id);
    expect(execution.operations[0].status).toBe('CANCELLED');
    expect((await stack.effects()).charges[reference]).toBeUndefined();
  });

  it('a never-sent held operation is not released once its execution was cancelled: it ended CANCELLED with it', async () => {
    const approvalRef = unique('rr-ended-approval');
    const heldRef = unique('rr-ended-held');
    const created = await submit(stack, [
      charge(approvalRef, { requires_approval: true }),
      charge(heldRef, { key: 'second', expected_state: { charged: true } }),
    ]);
    const held = await waitForOp(stack, created.id, 'second', (o) => o.status === 'MANUAL_REVIEW');
    await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
    const cancelled = await http(stack.apiUrl, 'POST', `/v1/executions/${created.id}/cancel`, { key: DEMO.agent });
    expect(cancelled.status).toBe(200);

    // Only CANCELLED was left to decide, so the cancel decided it: nothing is offered, a release is refused.
    const detail = await getOperation(stack, held.id);
    expect(detail).toMatchObject({ status: 'CANCELLED', attempt: 0, permitted_resolutions: [] });
    const refused = await resolve(held.id, 'SENT');
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ current_status: 'CANCELLED' });
    const effects = await stack.effects();
    expect([effects.charges[approvalRef], effects.charges[heldRef]]).toEqual([undefined, undefined]);
    expectLegalHistory(await events(stack, created.id));
  });

  it('a cancel and reviewers deciding the same held operation at once: cancelled unsent, or sent once first', async () => {
    const approvalRef = unique('rr-race-approval');
    const heldRef = unique('rr-race-held');
    const created = await submit(stack, [
      charge(approvalRef, { requires_approval: true }),
      charge(heldRef, { key: 'second', expected_state: { charged: true } }),
    ]);
    const held = await waitForOp(stack, created.id, 'second', (o) => o.status === 'MANUAL_REVIEW');
    await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
    const answers = await Promise.all([
      http(stack.apiUrl, 'POST', `/v1/executions/${created.id}/cancel`, { key: DEMO.agent }),
      resolve(held.id, 'SENT'),
      resolve(held.id, 'CANCELLED'),
      resolve(held.id, 'SENT'),
    ]);
    expect(answers[0].status).toBe(200);
    // Each reviewer's answer is a decision or a conflict, never an error.
    for (const answer of answers.slice(1)) expect([200, 409]).toContain(answer.status);
    const execution = await settle(stack, created.id);
    expect(execution.status).toBe('cancelled');
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    const path = statusPath(log, held.id);
    const charges = (await stack.effects()).charges;
    expect(charges[approvalRef]).toBeUndefined();
    // Two honest ends, never a mix: the cancel came first (ended with the execution, nothing sent), or a release's
    // SENT committed before it (sent once, reconciled to its truth: "sent, then cancelled", I11).
    if (path.includes('SENT')) {
      expect(path.slice(0, 3)).toEqual(['PREPARED', 'MANUAL_REVIEW', 'SENT']);
      expect(path.at(-1)).toBe('VERIFIED');
      expect(path).not.toContain('CANCELLED');
      expect(charges[heldRef].count).toBe(1);
    } else {
      expect(path).toEqual(['PREPARED', 'MANUAL_REVIEW', 'CANCELLED']);
      expect(charges[heldRef]).toBeUndefined();
    }
  });

  it('a never-sent held operation is released only once the operation it depends on is done', async () => {
    const firstRef = unique('rr-dep-first');
    const heldRef = unique('rr-dep-held');
    const created = await submit(stack, [
      charge(firstRef, { requires_approval: true }),
      charge(heldRef, { key: 'second', depends_on: ['charge'], expected_state: { charged: true } }),
    ]);
    const held = await waitForOp(stack, created.id, 'second', (o) => o.status === 'MANUAL_REVIEW');
    const first = await waitForOp(stack, created.id, 'charge', (o) => o.approval?.state === 'requested');
    expect((await getOperation(stack, held.id)).resolution_options?.find((o) => o.status === 'SENT')).toMatchObject({
      permitted: false,
      why: expect.stringContaining('depends on'),
    });
    expect((await resolve(held.id, 'SENT')).status).toBe(409);

    const approved = await http(stack.apiUrl, 'POST', `/v1/operations/${first.id}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'approve', reason: 'checked by the test' },
    });
    expect(approved.status).toBe(200);
    await waitForOp(stack, created.id, 'charge', (o) => o.status === 'VERIFIED');
    expect((await resolve(held.id, 'SENT')).status).toBe(200);
    await waitForOp(stack, created.id, 'second', (o) => o.status === 'VERIFIED');
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    const sentAt = (id: string) => log.find((e) => e.operation_id === id && e.to_status === 'SENT')!.seq;
    expect(sentAt(held.id)).toBeGreaterThan(sentAt(first.id));
    const effects = await stack.effects();
    expect([effects.charges[firstRef].count, effects.charges[heldRef].count]).toEqual([1, 1]);
  });

  it('an overdue obligation is escalated once, to the tenant’s escalation target, with an event', async () => {
    await stack.db.dataSource.query(
      `UPDATE tenants SET settings = settings || '{"obligationOwner": "payments-team", "escalationTarget": "pager:payments"}'::jsonb
       WHERE id = 'demo'`,
    );
    try {
      await stack.setFaults({ read_fault: 'amount_mismatch' });
      const created = await submit(stack, [charge(unique('rr-escalate'))]);
      const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
      expect(held.recovery_obligation).toMatchObject({ owner: 'payments-team', escalation_target: 'pager:payments' });
      const escalated = await waitForOp(
        stack,
        created.id,
        'charge',
        (o) => typeof o.recovery_obligation?.escalated_at === 'string',
      );
      expect(escalated.status).toBe('MANUAL_REVIEW');
      // Sweeps that could escalate again have run: still exactly one escalation.
      await stack.sweepsPassed(3);
      const log = await events(stack, created.id);
      const escalations = log.filter((e) => e.type === 'obligation.escalated');
      expect(escalations).toHaveLength(1);
      expect(escalations[0]).toMatchObject({
        operation_id: held.id,
        data: { to: 'pager:payments', owner: 'payments-team', due_at: held.recovery_obligation!.due_at },
      });
      expect(Date.parse(String(escalated.recovery_obligation!.escalated_at))).toBeGreaterThanOrEqual(
        Date.parse(String(held.recovery_obligation!.due_at)),
      );
    } finally {
      await stack.db.dataSource.query(
        `UPDATE tenants SET settings = settings - 'obligationOwner' - 'escalationTarget' WHERE id = 'demo'`,
      );
    }
  });
  it('a hold a reviewer released is not escalated while the dispatcher has yet to send it', async () => {
    const reference = unique('rr-released-due');
    const created = await submit(stack, [charge(reference, { expected_state: { charged: true } })]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect(held).toMatchObject({ terminal_reason: 'KNOWLEDGE_CONFLICT', attempt: 0 });
    // No dispatcher to carry the release out: it stays recorded, the operation held, until one is back.
    const [dispatcher] = stack.running('dispatcher');
    await stack.kill(dispatcher);
    try {
      expect((await resolve(held.id, 'SENT')).status).toBe(200);
      // Past the obligation's due time, and sweeps that would escalate an overdue one have run since.
      await waitFor(
        async () =>
          (
            (await stack.db.dataSource.query(
              `SELECT (obligation->>'due_at')::timestamptz < now() AS due FROM operations WHERE id = $1`,
              [held.id],
            )) as { due: boolean }[]
          )[0].due,
        (due) => due,
      );
      await stack.sweepsPassed(3);
      const op = await getOperation(stack, held.id);
      expect(op.status).toBe('MANUAL_REVIEW');
      // The reviewer decided before it was due: nobody is paged for an obligation that was met.
      expect(op.recovery_obligation?.escalated_at ?? null).toBeNull();
      expect((await events(stack, created.id)).filter((e) => e.type === 'obligation.escalated')).toEqual([]);
    } finally {
      await stack.startApp('dispatcher');
    }
    const sent = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'VERIFIED');
    expect(sent.attempt).toBe(1);
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });
});
