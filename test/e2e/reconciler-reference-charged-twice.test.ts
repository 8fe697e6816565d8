import { DEMO, DEMO_SANDBOX_ACCOUNT, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { Op, events, expectLegalHistory, getOperation, resetSandbox, statusPath, submit } from './dispatcher-helpers';

/**
 * A charge whose answer was lost (UNKNOWN: no provider id) and, before it is read back, a second charge of the same
 * reference in the tenant's account, made by another writer under another Idempotency-Key. The reconciler's read by
 * reference lists both, the operation's first. Nothing in the list says which is the operation's: it is held for a
 * person, INTEGRITY_MISMATCH on `charges`, both named. Before: the first listed was taken, VERIFIED — the second
 * charge of the order never looked at (and, listed the other way round, the verdict was another).
 */
describe('reconciler: an unanswered charge whose reference is charged a second time', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'rtwice' });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => resetSandbox(stack));

  it('is held for a person with both charges named, never VERIFIED on the first listed; a FAILED is refused', async () => {
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', count: 1 }],
    });
    const reference = unique('twice');
    const created = await submit(stack, [charge(reference)]);
    // The operation's charge is committed (its answer held back); the reads are refused while the other is made, so
    // no read-back lands before it.
    await waitFor(
      () => stack.effects(),
      (effects) => effects.charges[reference]?.count === 1,
      20_000,
      20,
    );
    await stack.setFaults({ read_fault: 'unavailable' });
    const other = await stack.sandbox('/v1/charges', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': unique('elsewhere'), ...DEMO_SANDBOX_ACCOUNT },
      body: JSON.stringify({ amount: 1250, currency: 'EUR', reference }),
    });
    expect(other.status).toBe(201);
    await stack.setFaults({});

    const opId = (
      await waitFor(
        () => events(stack, created.id),
        (log) => log.some((e) => e.operation_id),
      )
    ).find((e) => e.operation_id)!.operation_id!;
    const settled = await waitFor(
      () => getOperation(stack, opId),
      (op: Op) => op.status === 'VERIFIED' || op.status === 'FAILED' || op.status === 'MANUAL_REVIEW',
      45_000,
      150,
    );
    expect(settled.status).toBe('MANUAL_REVIEW');
    expect(settled.terminal_reason).toBe('INTEGRITY_MISMATCH');
    const charges = (await stack.effects()).charges[reference];
    expect(charges.count).toBe(2);
    expect(settled.evidence).toMatchObject({ mismatched: ['charges'], record: null });
    expect((settled.evidence as { charges: { id: string }[] }).charges.map((c) => c.id)).toEqual(charges.ids);
    // A charge of the order exists: "no effect, a retry is safe" is refused.
    const refused = await http<{ type?: string }>(stack.apiUrl, 'POST', `/v1/operations/${opId}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'FAILED', evidence: 'checked by the test' },
    });
    expect(refused.status).toBe(409);

    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(statusPath(log, opId)).not.toContain('VERIFIED');
  });
});
