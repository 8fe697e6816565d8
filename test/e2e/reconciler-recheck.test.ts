import { createApiKey } from '@verity/persistence/api-keys';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, sms, unique } from '../support/http';
import {
  Event,
  Op,
  events,
  expectLegalHistory,
  getExecution,
  getOperation,
  resetSandbox,
  stackQueue,
  statusPath,
  submit,
  waitForMarkers,
  waitForOp,
  waitForResolutionPermitted,
} from './dispatcher-helpers';

const OTHER_REVIEWER = 'test-recheck-other-tenant-reviewer-key';

interface Problem {
  type: string;
  decision?: string;
  errors?: { field: string; rule: string }[];
}

interface Investigation {
  evidence: string;
  by: string;
  at: string;
  previous_due_at: string;
  due_at: string;
}

/**
 * A hold is a place to wait, not a dead end: a MANUAL_REVIEW for an unreachable or lagging source is read again (never
 * re-sent) until its obligation is due and released to VERIFIED once the effect shows; a reviewer can ask for that
 * read now; and a reviewer can say "still unknown after investigation", which keeps the hold and re-dates it.
 */
describe('reconciler: re-checks of held operations, and "still unknown"', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({
      label: 'rrecheck',
      env: { RECHECK_BACKOFF_MS: '1500', RECHECK_BACKOFF_MAX_MS: '3000', OBLIGATION_DUE_MS: '600000' },
    });
    await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo-other', role: 'reviewer', key: OTHER_REVIEWER });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => {
    await resetSandbox(stack);
    await setPolicy({ obligation_due_seconds: null });
  });

  async function setPolicy(body: unknown) {
    const res = await http(stack.apiUrl, 'PUT', '/v1/admin/policy', { key: DEMO.admin, body });
    expect(res.status).toBe(200);
  }

  const post = <T>(path: string, body?: unknown, key = DEMO.reviewer) =>
    http<T & Problem>(stack.apiUrl, 'POST', path, { key, body });

  const recheckEvents = (log: Event[], opId: string) =>
    log.filter((e) => e.type === 'operation.rechecked' && e.operation_id === opId);

  async function heldFor(
    reason: string,
    operation: unknown,
    extra: Record<string, unknown> = {},
  ): Promise<{ executionId: string; held: Op }> {
    const created = await submit(stack, [operation], extra);
    const held = await waitForOp(
      stack,
      created.id,
      (operation as { key: string }).key,
      (o) => o.status === 'MANUAL_REVIEW',
    );
    expect(held.terminal_reason).toBe(reason);
    return { executionId: created.id, held };
  }

  it('a SOURCE_UNREACHABLE hold is read again while the source is down, and released once it answers', async () => {
    await stack.setFaults({ read_fault: 'unavailable' });
    const reference = unique('rc-auto');
    const { executionId, held } = await heldFor('SOURCE_UNREACHABLE', charge(reference));

    // Still down: a re-check reads, finds nothing it can use, and the operation stays held.
    await waitFor(
      () => events(stack, executionId),
      (log) => recheckEvents(log, held.id).length >= 1,
    );
    const first = recheckEvents(await events(stack, executionId), held.id)[0];
    expect(first.data).toMatchObject({ trigger: 'scheduled', result: 'unreachable', held_for: 'SOURCE_UNREACHABLE' });
    expect(typeof first.data.next_check_at).toBe('string');
    expect((await getOperation(stack, held.id)).status).toBe('MANUAL_REVIEW');

    await resetSandbox(stack);
    const verified = await waitForOp(stack, executionId, 'charge', (o) => o.status === 'VERIFIED');
    expect(verified.terminal_reason).toBeNull();
    expect(verified.evidence).toMatchObject({
      method: 'read_after_write',
      record: { reference },
      recheck: { trigger: 'scheduled', held_for: 'SOURCE_UNREACHABLE' },
    });
    const log = await events(stack, executionId);
    expectLegalHistory(log);
    const release = log.find((e) => e.operation_id === held.id && e.to_status === 'VERIFIED')!;
    expect(release).toMatchObject({ from_status: 'MANUAL_REVIEW', data: { actor: 'system' } });
    // Read, never re-sent.
    expect(statusPath(log, held.id).filter((s) => s === 'SENT')).toHaveLength(1);
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });

  it('the hold is not lost when Redis loses its jobs: the sweeper finds it by next_check_at', async () => {
    await stack.setFaults({ read_fault: 'unavailable' });
    const reference = unique('rc-lost');
    const { executionId } = await heldFor('SOURCE_UNREACHABLE', charge(reference));
    for (const reconciler of stack.running('reconciler')) await stack.kill(reconciler, 'SIGTERM');
    const queue = stackQueue(stack, 'reconcile');
    try {
      await queue.drain(true);
      expect(await queue.getJobCounts('delayed', 'waiting', 'prioritized')).toEqual({
        delayed: 0,
        waiting: 0,
        prioritized: 0,
      });
    } finally {
      await queue.close();
    }
    await resetSandbox(stack);
    await stack.startApp('reconciler');
    const verified = await waitForOp(stack, executionId, 'charge', (o) => o.status === 'VERIFIED');
    expect(verified.evidence).toMatchObject({ recheck: { trigger: 'scheduled' } });
    expectLegalHistory(await events(stack, executionId));
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });

  it('a reviewer asks for a re-check now: 202, the read is recorded, and a found effect releases the hold', async () => {
    // Due at once: no automatic re-check is scheduled, so whatever reads the source here is the reviewer's request.
    await setPolicy({ obligation_due_seconds: { SOURCE_UNREACHABLE: 1 } });
    await stack.setFaults({ read_fault: 'unavailable' });
    const reference = unique('rc-now');
    const { executionId, held } = await heldFor('SOURCE_UNREACHABLE', charge(reference));

    const asked = await post<Op>(`/v1/operations/${held.id}/recheck`);
    expect(asked.status).toBe(202);
    expect(asked.body).toMatchObject({ id: held.id, status: 'MANUAL_REVIEW' });
    const log = await waitFor(
      () => events(stack, executionId),
      (l) => recheckEvents(l, held.id).length >= 1,
    );
    expect(recheckEvents(log, held.id)).toEqual([
      expect.objectContaining({
        data: expect.objectContaining({
          trigger: 'reviewer',
          requested_by: expect.any(String),
          result: 'unreachable',
          next_check_at: null,
        }),
      }),
    ]);
    expect((await getOperation(stack, held.id)).status).toBe('MANUAL_REVIEW');

    await resetSandbox(stack);
    // One read per second at most: wait for the next second so this request is not folded into the first.
    await new Promise((r) => setTimeout(r, 1100));
    expect((await post<Op>(`/v1/operations/${held.id}/recheck`)).status).toBe(202);
    const verified = await waitForOp(stack, executionId, 'charge', (o) => o.status === 'VERIFIED');
    expect(verified.evidence).toMatchObject({ recheck: { trigger: 'reviewer', held_for: 'SOURCE_UNREACHABLE' } });
    expectLegalHistory(await events(stack, executionId));

    // No longer held: 409.
    const again = await post<Problem>(`/v1/operations/${held.id}/recheck`);
    expect(again.status).toBe(409);
    expect(again.body.type).toContain('not-in-review');
  });

  /**
   * A sent charge never acknowledged, held SOURCE_UNREACHABLE; a reviewer's re-check is paused before its read while
   * the source answers wrongly (a replica that lost the record: up to date, no charge), so the reviewer's FAILED is
   * accepted on their evidence and that read; then the source answers again and the re-check's read shows the charge.
   * Resolves once that read is in the history; the paused reconciler is replaced by a normal one either way.
   * `afterFailed` runs between the FAILED and the source answering again (the re-check waits longer for it).
   */
  async function failedWhileARecheckReads(
    reference: string,
    extra: Record<string, unknown> = {},
    afterFailed?: (executionId: string) => Promise<void>,
  ) {
    const reason = 'SOURCE_UNREACHABLE';
    // Due at once: no scheduled re-check.
    await setPolicy({ obligation_due_seconds: { [reason]: 1 } });
    // Taken by the provider, the answer lost (so never acknowledged), its reads down since.
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', count: 1 }],
      read_fault: 'unavailable',
    });
    const { executionId, held } = await heldFor(reason, charge(reference), extra);
    await waitForResolutionPermitted(stack, held.id, 'FAILED');
    for (const reconciler of stack.running('reconciler')) await stack.kill(reconciler, 'SIGTERM');
    const paused = await stack.startApp('reconciler', {
      TEST_PAUSE_BEFORE_READ_MS: afterFailed ? '10000' : '3000',
    });
    try {
      expect((await post(`/v1/operations/${held.id}/recheck`)).status).toBe(202);
      await waitForMarkers(paused, 'paused before read-back');
      await stack.setFaults({ read_fault: 'record_lost' });
      const failed = await post<Op>(`/v1/operations/${held.id}/resolve`, {
        status: 'FAILED',
        evidence: 'the provider dashboard was down; the customer says no charge',
      });
      expect(failed.status).toBe(200);
      await afterFailed?.(executionId);
      // The source answers again before the re-check's read: it shows the charge the record now calls FAILED.
      await resetSandbox(stack);
      // Nothing is left to wait for at the pause: SIGUSR2 ends it (docs/operations.md "Test-only hooks").
      paused.child.kill('SIGUSR2');
      const log = await waitFor(
        () => events(stack, executionId),
        (l) => recheckEvents(l, held.id).some((e) => e.data.result === 'found' && e.data.after === 'FAILED'),
      );
      return { executionId, held, log, reason };
    } finally {
      await stack.kill(paused, 'SIGTERM');
      await stack.startApp('reconciler');
    }
  }

  // (A hold whose record is on file — acknowledged, or found by its own read — cannot be resolved FAILED at all.)
  it('a re-check that finds the effect after a reviewer resolved a SOURCE_UNREACHABLE hold FAILED writes what it found into the history', async () => {
    const reference = unique('rc-late');
    // An agent that declared it expects this charge declined: satisfied by the FAILED, until the source shows it.
    const outcomeOf = (executionId: string) =>
      waitFor(
        () => getExecution(stack, executionId),
        (e) => e.outcome?.result !== 'pending',
        15_000,
        100,
      );
    let outcomeAfterFailed: string | undefined;
    const { executionId, held, log, reason } = await failedWhileARecheckReads(
      reference,
      { criteria: [{ key: 'declined', operation: 'charge', expect_status: 'FAILED' }] },
      async (id) => {
        outcomeAfterFailed = (await outcomeOf(id)).outcome?.result;
      },
    );
    expect(outcomeAfterFailed).toBe('satisfied');
    expect(recheckEvents(log, held.id).at(-1)!.data).toMatchObject({
      trigger: 'reviewer',
      result: 'found',
      after: 'FAILED',
      held_for: reason,
      evidence: { record: { reference } },
    });
    // The FAILED stays, but the operation no longer says "rejected, a retry is safe": the source showed the effect.
    expect(await getOperation(stack, held.id)).toMatchObject({
      status: 'FAILED',
      commit: 'unknown',
      retry: 'forbidden',
      recovery_obligation: { effect_shown_after_failed: { result: 'found' } },
    });
    expectLegalHistory(log);
    // The criterion is judged again: a FAILED the source contradicts no longer satisfies "declined".
    const judged = await waitFor(
      () => getExecution(stack, executionId),
      (e) => e.outcome?.result === 'unmet',
      15_000,
      100,
    );
    expect(judged.criteria_results?.[0]).toMatchObject({
      key: 'declined',
      verdict: 'fail',
      rationale: expect.stringContaining('"charge" is FAILED, but what was recorded since contradicts it'),
    });
  });

  it('an operation resolved FAILED whose re-check then found the effect cannot be retried: 409 effect-exists', async () => {
    const reference = unique('rc-retry');
    const { held } = await failedWhileARecheckReads(reference);
    // The source has shown the effect: "no effect, a retry is safe" no longer stands, and a retry could make it twice.
    const retried = await http<Problem & { read_back?: { kind: string; evidence: unknown } }>(
      stack.apiUrl,
      'POST',
      `/v1/operations/${held.id}/retry`,
      { key: DEMO.agent },
    );
    expect(retried.status).toBe(409);
    expect(retried.body.type).toContain('effect-exists');
    expect(retried.body.read_back).toMatchObject({ kind: 'found', evidence: { record: { reference } } });
    // The refusal says what the operation shows (retry forbidden), not the `safe` of a FAILED as such.
    expect(retried.body).toMatchObject({ current_status: 'FAILED', retry: 'forbidden' });
    expect(await getOperation(stack, held.id)).toMatchObject({
      status: 'FAILED',
      retry: 'forbidden',
      commit: 'unknown',
    });
    const [{ n }] = (await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM operations WHERE retry_of = $1`, [
      held.id,
    ])) as { n: number }[];
    expect(n).toBe(0);
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });

  it('a re-check that showed the effect keeps FAILED refused, also when the reviewer’s own read then finds nothing', async () => {
    const reference = unique('rc-shown');
    // Due at once: no scheduled re-check, only the reviewer's.
    await setPolicy({ obligation_due_seconds: { SOURCE_UNREACHABLE: 1 } });
    // Taken by the provider, the answer lost, its reads down since.
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', count: 1 }],
      read_fault: 'unavailable',
    });
    const { executionId, held } = await heldFor('SOURCE_UNREACHABLE', charge(reference));
    await waitForResolutionPermitted(stack, held.id, 'FAILED');
    // The source answers again, showing the charge with another amount: a person must judge it, but it exists.
    await stack.setFaults({ read_fault: 'amount_mismatch' });
    expect((await post(`/v1/operations/${held.id}/recheck`)).status).toBe(202);
    await waitFor(
      () => events(stack, executionId),
      (l) => recheckEvents(l, held.id).some((e) => e.data.result === 'mismatch'),
    );
    const shown = await http<Op & { permitted_resolutions: string[] }>(
      stack.apiUrl,
      'GET',
      `/v1/operations/${held.id}`,
      { key: DEMO.reviewer },
    );
    expect(shown.body).toMatchObject({
      status: 'MANUAL_REVIEW',
      permitted_resolutions: ['VERIFIED'],
      recovery_obligation: { permitted_actions: ['VERIFIED'], effect_shown: { result: 'mismatch' } },
    });
    // Then the source flaps and shows nothing: the reviewer's FAILED, whose own read is absent, is still refused.
    await stack.setFaults({ read_fault: 'record_lost' });
    const failed = await post<{ read_back?: { kind: string } }>(`/v1/operations/${held.id}/resolve`, {
      status: 'FAILED',
      evidence: 'the provider dashboard shows no such charge',
    });
    expect(failed.status).toBe(409);
    expect(failed.body.type).toContain('effect-exists');
    expect(failed.body.read_back).toMatchObject({ kind: 'mismatch' });
    const log = await events(stack, executionId);
    expect(log.filter((e) => e.type === 'operation.resolved')).toHaveLength(0);
    expect(await getOperation(stack, held.id)).toMatchObject({ status: 'MANUAL_REVIEW' });
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });

  it('a re-check of a hold that needs judgement records the read and keeps the hold', async () => {
    await stack.setFaults({ read_fault: 'field_missing' });
    const { executionId, held } = await heldFor('FIELD_MISSING', charge(unique('rc-field')));
    await resetSandbox(stack);
    expect((await post(`/v1/operations/${held.id}/recheck`)).status).toBe(202);
    const log = await waitFor(
      () => events(stack, executionId),
      (l) => recheckEvents(l, held.id).length >= 1,
    );
    expect(recheckEvents(log, held.id)[0].data).toMatchObject({
      trigger: 'reviewer',
      result: 'found',
      next_check_at: null,
    });
    expect(await getOperation(stack, held.id)).toMatchObject({
      status: 'MANUAL_REVIEW',
      terminal_reason: 'FIELD_MISSING',
    });
  });

  it('recheck answers 409 when nothing can be read back, 404 across tenants and 403 for an agent', async () => {
    await stack.setFaults({ rules: [{ method: 'POST', path: '/v1/messages', fault: 'drop_before_commit', count: 1 }] });
    const { held: smsHeld } = await heldFor('CONNECTOR_ERROR', sms(unique('rc-sms')));
    const noReadBack = await post<Problem>(`/v1/operations/${smsHeld.id}/recheck`);
    expect(noReadBack.status).toBe(409);
    expect(noReadBack.body.type).toContain('cannot-read-back');

    const { held: neverSent } = await heldFor(
      'KNOWLEDGE_CONFLICT',
      charge(unique('rc-never'), { expected_state: { charged: true } }),
    );
    const nothingSent = await post<Problem>(`/v1/operations/${neverSent.id}/recheck`);
    expect(nothingSent.status).toBe(409);
    expect(nothingSent.body.type).toContain('cannot-read-back');

    expect((await post(`/v1/operations/${smsHeld.id}/recheck`, undefined, OTHER_REVIEWER)).status).toBe(404);
    expect((await post(`/v1/operations/${smsHeld.id}/recheck`, undefined, DEMO.agent)).status).toBe(403);
  });

  it('"still unknown after investigation" keeps the hold, re-dates the obligation, and a real resolution still follows', async () => {
    // Due at once, so the obligation is escalated before the reviewer re-dates it.
    await setPolicy({ obligation_due_seconds: { FIELD_MISSING: 1 } });
    await stack.setFaults({ read_fault: 'field_missing' });
    const { executionId, held } = await heldFor('FIELD_MISSING', charge(unique('rc-unknown')));
    const escalated = await waitForOp(
      stack,
      executionId,
      'charge',
      (o) => typeof o.recovery_obligation?.escalated_at === 'string',
    );
    const previousDue = String(escalated.recovery_obligation!.due_at);

    const bad = await post<Problem>(`/v1/operations/${held.id}/resolve`, {
      status: 'VERIFIED',
      evidence: 'x',
      due_in_seconds: 60,
    });
    expect(bad.status).toBe(400);
    expect(bad.body.errors).toContainEqual(
      expect.objectContaining({ field: 'due_in_seconds', rule: 'only_with_still_unknown' }),
    );

    const kept = await post<Op>(`/v1/operations/${held.id}/resolve`, {
      status: 'MANUAL_REVIEW',
      evidence: 'provider support ticket #42 open: they cannot tell yet',
      due_in_seconds: 7200,
    });
    expect(kept.status).toBe(200);
    expect(kept.body).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'FIELD_MISSING' });
    const obligation = kept.body.recovery_obligation as NonNullable<Op['recovery_obligation']> & {
      investigations: Investigation[];
    };
    expect(obligation.escalated_at).toBeNull();
    expect(obligation.resolution).toBeUndefined();
    expect(obligation.investigations).toEqual([
      {
        evidence: 'provider support ticket #42 open: they cannot tell yet',
        by: expect.any(String),
        at: expect.any(String),
        previous_due_at: previousDue,
        due_at: obligation.due_at,
      },
    ]);
    const redatedBy = (Date.parse(String(obligation.due_at)) - Date.parse(obligation.investigations[0].at)) / 1000;
    expect(redatedBy).toBe(7200);
    expect(kept.body.permitted_resolutions).toEqual(['VERIFIED']);

    // Concurrent "still unknown" records: each one that is written answers 200, the others 409 already-decided.
    const racers = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        post<Op>(`/v1/operations/${held.id}/resolve`, { status: 'MANUAL_REVIEW', evidence: `racer ${i}` }),
      ),
    );
    const won = racers.filter((r) => r.status === 200);
    expect(won.length).toBeGreaterThanOrEqual(1);
    for (const lost of racers.filter((r) => r.status !== 200)) {
      expect(lost.status).toBe(409);
      expect(lost.body).toMatchObject({ decision: 'MANUAL_REVIEW' });
      expect(lost.body.type).toContain('already-decided');
    }
    let log = await events(stack, executionId);
    const recorded = log.filter((e) => e.type === 'operation.still_unknown');
    expect(recorded).toHaveLength(1 + won.length);
    expect((await getOperation(stack, held.id)).recovery_obligation!.investigations).toHaveLength(1 + won.length);

    // A real resolution after it still works, and then "still unknown" no longer applies.
    const resolved = await post<Op>(`/v1/operations/${held.id}/resolve`, {
      status: 'VERIFIED',
      evidence: 'provider confirmed the charge',
    });
    expect(resolved.status).toBe(200);
    expect(resolved.body.status).toBe('VERIFIED');
    const late = await post<Problem>(`/v1/operations/${held.id}/resolve`, {
      status: 'MANUAL_REVIEW',
      evidence: 'late',
    });
    expect(late.status).toBe(409);
    expect(late.body).toMatchObject({ decision: 'VERIFIED' });
    log = await events(stack, executionId);
    expectLegalHistory(log);
    expect(log.filter((e) => e.type === 'operation.resolved').map((e) => e.data.status)).toEqual(['VERIFIED']);
    expect(statusPath(log, held.id).slice(-2)).toEqual(['MANUAL_REVIEW', 'VERIFIED']);
  });

  // A re-check reads, then writes the count and the next read it worked out from the obligation it read. A reviewer's
  // "still unknown" recorded during the read re-dated the obligation: the write undid it, scheduling the next read
  // past the new due time (where no automatic read may fall) from the old one.
  it('a re-check whose read spans a "still unknown" works its next read out from the re-dated obligation', async () => {
    const reason = 'SOURCE_UNREACHABLE';
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', count: 1 }],
      read_fault: 'unavailable',
    });
    const { executionId, held } = await heldFor(reason, charge(unique('rc-redated')));
    for (const reconciler of stack.running('reconciler')) await stack.kill(reconciler, 'SIGTERM');
    // Its reads pause 3 s; its own next read would come 40 s or more later (well inside the first due time).
    const paused = await stack.startApp('reconciler', {
      TEST_PAUSE_BEFORE_READ_MS: '3000',
      RECHECK_BACKOFF_MS: '20000',
      RECHECK_BACKOFF_MAX_MS: '60000',
    });
    try {
      expect((await post(`/v1/operations/${held.id}/recheck`)).status).toBe(202);
      await waitForMarkers(paused, 'paused before read-back');
      const kept = await post<Op>(`/v1/operations/${held.id}/resolve`, {
        status: 'MANUAL_REVIEW',
        evidence: 'provider support: the charge is still being looked into',
        due_in_seconds: 10,
      });
      expect(kept.status).toBe(200);
      // The re-date is recorded during the read: SIGUSR2 ends the pause (docs/operations.md "Test-only hooks").
      paused.child.kill('SIGUSR2');
      const dueAt = Date.parse(String(kept.body.recovery_obligation!.due_at));
      const log = await waitFor(
        () => events(stack, executionId),
        (l) => {
          const redated = l.find((e) => e.type === 'operation.still_unknown');
          return Boolean(redated) && recheckEvents(l, held.id).some((e) => e.seq > redated!.seq);
        },
      );
      const redatedSeq = log.find((e) => e.type === 'operation.still_unknown')!.seq;
      const firstAfter = recheckEvents(log, held.id).find((e) => e.seq > redatedSeq)!;
      expect(firstAfter.data).toMatchObject({ result: 'unreachable' });
      // No automatic read is scheduled past the obligation's due time: 40 s after would be 30 s past it.
      const next = firstAfter.data.next_check_at as string | null;
      expect(next === null || Date.parse(next) <= dueAt).toBe(true);
      const [row] = (await stack.db.dataSource.query(
        `SELECT next_check_at, (obligation->>'rechecks')::int AS rechecks FROM operations WHERE id = $1`,
        [held.id],
      )) as { next_check_at: Date | null; rechecks: number }[];
      expect(row.next_check_at === null || row.next_check_at.getTime() <= dueAt).toBe(true);
    } finally {
      await stack.kill(paused, 'SIGTERM');
      await stack.startApp('reconciler');
    }
  });

  it('a hold keeps at most 100 "still unknown" records: the next is 409 and writes nothing', async () => {
    await stack.setFaults({ read_fault: 'field_missing' });
    const { executionId, held } = await heldFor('FIELD_MISSING', charge(unique('rc-many-unknowns')));
    for (let i = 0; i < 100; i += 1) {
      const kept = await post<Op>(`/v1/operations/${held.id}/resolve`, {
        status: 'MANUAL_REVIEW',
        evidence: `still waiting for the provider, day ${i + 1}`,
      });
      expect(kept.status).toBe(200);
    }
    const before = await events(stack, executionId);
    const refused = await post<Problem>(`/v1/operations/${held.id}/resolve`, {
      status: 'MANUAL_REVIEW',
      evidence: 'still waiting, day 101',
    });
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ current_status: 'MANUAL_REVIEW', investigations: 100 });
    expect(refused.body.type).toContain('resolution-not-permitted');
    expect(await events(stack, executionId)).toHaveLength(before.length);
    const op = await getOperation(stack, held.id);
    expect(op.recovery_obligation!.investigations).toHaveLength(100);
    // The hold is still a reviewer's to resolve.
    expect(op.permitted_resolutions).toEqual(['VERIFIED']);
  });
});
