import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, sms, unique } from '../support/http';
import {
  Op,
  events,
  expectLegalHistory,
  getExecution,
  resetSandbox,
  settle,
  statusPath,
  submit,
  waitForResolutionPermitted,
} from './dispatcher-helpers';

/**
 * Each verification and reconciliation path, driven by the sandbox's faults against the real processes.
 * "Did not happen" (FAILED) only from an authoritative read once the settle window has passed; everything that cannot
 * conclude is retried, then held in MANUAL_REVIEW with the matching terminal reason and a recovery obligation.
 */
describe('reconciler: verification and reconciliation paths', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'rpaths' });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => resetSandbox(stack));

  type Effects = Awaited<ReturnType<Stack['effects']>>;

  function expectObligation(op: Op, reason: string, permitted: string[]) {
    expect(op.recovery_obligation).toEqual({
      reason,
      owner: expect.any(String),
      evidence_required: expect.any(String),
      permitted_actions: permitted,
      due_at: expect.any(String),
      escalation_target: expect.any(String),
      escalated_at: null,
    });
    expect(Date.parse(String(op.recovery_obligation!.due_at))).toBeGreaterThan(Date.now());
  }

  it('timeout_after_commit → UNKNOWN → RECONCILING → VERIFIED, with one effect and the read stored as evidence', async () => {
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', count: 1 }],
    });
    const reference = unique('rp-timeout');
    const created = await submit(stack, [charge(reference)]);
    const execution = await settle(stack, created.id);
    const [op] = execution.operations;
    expect(op).toMatchObject({ status: 'VERIFIED', terminal_reason: null, observation: 'converged' });
    expect(op.evidence).toMatchObject({
      method: 'read_after_write',
      source: expect.stringContaining(`/v1/charges?reference=${reference}`),
      account: 'demo',
      read_at: expect.any(String),
      as_of_version: expect.any(Number),
      record: { reference, amount: 1250, currency: 'EUR', status: 'succeeded' },
    });
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(statusPath(log, op.id)).toEqual(['PREPARED', 'SENT', 'UNKNOWN', 'RECONCILING', 'VERIFIED']);
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });

  it('drop_before_commit → UNKNOWN → … → FAILED (proven absent after the settle window), zero effects', async () => {
    await stack.setFaults({ rules: [{ method: 'POST', path: '/v1/charges', fault: 'drop_before_commit', count: 1 }] });
    const reference = unique('rp-drop');
    const created = await submit(stack, [charge(reference)]);
    const execution = await settle(stack, created.id);
    const [op] = execution.operations;
    // Proven absence is a reason of its own: the FAILED says why, not just that.
    expect(op).toMatchObject({ status: 'FAILED', terminal_reason: 'PROVEN_ABSENT' });
    expect(op.evidence).toMatchObject({
      method: 'read_after_write',
      found: false,
      proven_absent_after_ms: expect.any(Number),
    });
    // Not before the send could have landed and the replica shown it.
    expect(Number(op.evidence!.proven_absent_after_ms)).toBeGreaterThanOrEqual(500 + 1000 + 1500);
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    const path = statusPath(log, op.id);
    expect(path.slice(0, 4)).toEqual(['PREPARED', 'SENT', 'UNKNOWN', 'RECONCILING']);
    expect(path.at(-1)).toBe('FAILED');
    expect(path.filter((s) => s === 'FAILED')).toHaveLength(1);
    expect((await stack.effects()).charges[reference]).toBeUndefined();
  });

  it("another tenant's charge of the same reference never settles this tenant's UNKNOWN: proven absent, FAILED", async () => {
    const reference = unique('rp-tenant');
    const mine = await submit(stack, [charge(reference)]);
    expect((await settle(stack, mine.id)).operations[0].status).toBe('VERIFIED');
    await stack.setFaults({ rules: [{ method: 'POST', path: '/v1/charges', fault: 'drop_before_commit', count: 1 }] });
    const theirs = await submit(stack, [charge(reference)], {}, DEMO.otherAgent);
    const execution = await settle(stack, theirs.id, undefined, DEMO.otherAgent);
    expect(execution.operations[0]).toMatchObject({ status: 'FAILED', terminal_reason: 'PROVEN_ABSENT' });
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });

  // Held at once, before any read, when no read could settle the UNKNOWN: the connector cannot read back (an SMS), or
  // the agent asked for no verification (VERIFIED is then a person's to write, though the source shows the charge).
  it.each([
    {
      name: 'an SMS timeout (no read-back)',
      path: '/v1/messages',
      operation: (ref: string) => sms(ref),
      detail: 'cannot read back',
      effects: (ref: string, e: Effects) => e.messages[ref].count,
    },
    {
      name: 'a charge timeout with no verification asked for',
      path: '/v1/charges',
      operation: (ref: string) => charge(ref, { verification_method: '' }),
      detail: 'verification_method',
      effects: (ref: string, e: Effects) => e.charges[ref].count,
    },
  ])('$name → UNKNOWN → MANUAL_REVIEW at once, never re-sent', async ({ path, operation, detail, effects }) => {
    await stack.setFaults({ rules: [{ method: 'POST', path, fault: 'timeout_after_commit', count: 1 }] });
    const ref = unique('rp-held-at-once');
    const created = await submit(stack, [operation(ref)]);
    const execution = await settle(stack, created.id);
    const [op] = execution.operations;
    expect(op).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'CONNECTOR_ERROR', attempt: 1 });
    expect(op.evidence).toMatchObject({ method: 'none', detail: expect.stringContaining(detail) });
    // Held at once, while a call of it may still land: FAILED is offered only from then on, as resolve accepts it (I14;
    // until 2026-12-03 the obligation listed it at once while resolve refused it).
    expectObligation(op, 'CONNECTOR_ERROR', ['VERIFIED']);
    await waitForResolutionPermitted(stack, op.id, 'FAILED');
    expectObligation((await getExecution(stack, created.id)).operations[0], 'CONNECTOR_ERROR', ['VERIFIED', 'FAILED']);
    expect(statusPath(await events(stack, created.id), op.id)).toEqual([
      'PREPARED',
      'SENT',
      'UNKNOWN',
      'MANUAL_REVIEW',
    ]);
    // Sweeps that would re-send it have run: nothing re-sent it.
    await stack.sweepsPassed(3);
    expect(effects(ref, await stack.effects())).toBe(1);
  });

  it('a replica lagging beyond the budget → MANUAL_REVIEW / STALE_REPLICA', async () => {
    await stack.setFaults({ replica_lag_ms: 60_000 });
    const reference = unique('rp-stale');
    const created = await submit(stack, [charge(reference)]);
    const execution = await settle(stack, created.id);
    const [op] = execution.operations;
    expect(op).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'STALE_REPLICA' });
    // The provider acknowledged the charge: a record of it is on file, so "no effect exists" is not permitted.
    expectObligation(op, 'STALE_REPLICA', ['VERIFIED']);
    expect(op.evidence).toMatchObject({ checks: 6, as_of_version: expect.any(Number) });
    expect(statusPath(await events(stack, created.id), op.id)).toEqual([
      'PREPARED',
      'SENT',
      'ACKNOWLEDGED',
      'MANUAL_REVIEW',
    ]);
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });

  it('read_fault field_missing → MANUAL_REVIEW / FIELD_MISSING', async () => {
    await stack.setFaults({ read_fault: 'field_missing' });
    const reference = unique('rp-field');
    const created = await submit(stack, [charge(reference)]);
    const [op] = (await settle(stack, created.id)).operations;
    expect(op).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'FIELD_MISSING' });
    // The provider acknowledged the charge: a record of it is on file, so "no effect exists" is not permitted.
    expectObligation(op, 'FIELD_MISSING', ['VERIFIED']);
    expect((op.evidence!.record as Record<string, unknown>).status).toBeUndefined();
  });

  it('read_fault unavailable → retried, then MANUAL_REVIEW / SOURCE_UNREACHABLE', async () => {
    await stack.setFaults({ read_fault: 'unavailable' });
    const reference = unique('rp-unavailable');
    const created = await submit(stack, [charge(reference)]);
    const [op] = (await settle(stack, created.id)).operations;
    expect(op).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'SOURCE_UNREACHABLE' });
    // The provider acknowledged the charge: a record of it is on file, so "no effect exists" is not permitted.
    expectObligation(op, 'SOURCE_UNREACHABLE', ['VERIFIED']);
    expect(op.evidence).toMatchObject({ error: 'status 503', checks: 6 });
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });

  it('an UNKNOWN whose source stays unreachable: RECONCILING ⇄ UNKNOWN with backoff, then MANUAL_REVIEW', async () => {
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'reset_after_commit', count: 1 }],
      read_fault: 'unavailable',
    });
    const reference = unique('rp-unknown-unreachable');
    const created = await submit(stack, [charge(reference)]);
    // While the reconciler goes back and forth, GET names the connector error that left the outcome uncertain...
    const looping = await waitFor(
      async () => ({ op: (await getExecution(stack, created.id)).operations[0], log: await events(stack, created.id) }),
      ({ op, log }) =>
        op !== undefined &&
        statusPath(log, op.id).includes('RECONCILING') &&
        ['UNKNOWN', 'RECONCILING'].includes(op.status),
    );
    expect(looping.op.terminal_reason).toBe('CONNECTOR_ERROR');
    const [op] = (await settle(stack, created.id)).operations;
    expect(op).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'SOURCE_UNREACHABLE' });
    const log = await events(stack, created.id);
    const path = statusPath(log, op.id);
    expect(path.slice(0, 4)).toEqual(['PREPARED', 'SENT', 'UNKNOWN', 'RECONCILING']);
    expect(path.filter((s) => s === 'RECONCILING').length).toBeGreaterThan(1);
    expect(path.at(-1)).toBe('MANUAL_REVIEW');
    // ... and so does each of those moves' event, as GET said then (before, every move into RECONCILING and back into
    // UNKNOWN said null).
    const loop = log.filter(
      (e) => e.type === 'operation.status_changed' && ['UNKNOWN', 'RECONCILING'].includes(e.to_status ?? ''),
    );
    expect(loop.length).toBeGreaterThan(3);
    expect(new Set(loop.map((e) => e.data?.reason))).toEqual(new Set(['CONNECTOR_ERROR']));
  });

  it('a read-back with a different amount (read_fault amount_mismatch) → MANUAL_REVIEW / INTEGRITY_MISMATCH', async () => {
    await stack.setFaults({ read_fault: 'amount_mismatch' });
    const reference = unique('rp-mismatch');
    const created = await submit(stack, [charge(reference)]);
    const [op] = (await settle(stack, created.id)).operations;
    expect(op).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'INTEGRITY_MISMATCH' });
    // The source showed the charge: "no effect exists" is not a permitted action (I14).
    expectObligation(op, 'INTEGRITY_MISMATCH', ['VERIFIED']);
    expect(op.evidence).toMatchObject({ mismatched: ['amount'], record: { amount: 1251 } });
    expect((await stack.effects()).charges[reference]).toMatchObject({ count: 1, amounts: [1250] });
  });

  it('every MANUAL_REVIEW operation carries a complete recovery obligation', async () => {
    const held = (await stack.db.dataSource.query(
      `SELECT id, obligation FROM operations WHERE status = 'MANUAL_REVIEW'`,
    )) as { id: string; obligation: Record<string, unknown> | null }[];
    expect(held.length).toBeGreaterThanOrEqual(6);
    for (const { obligation } of held) {
      expect(obligation).toMatchObject({
        reason: expect.any(String),
        owner: expect.any(String),
        evidence_required: expect.any(String),
        permitted_actions: expect.any(Array),
        due_at: expect.any(String),
        escalation_target: expect.any(String),
      });
      expect((obligation!.permitted_actions as string[]).length).toBeGreaterThan(0);
    }
  });
});
