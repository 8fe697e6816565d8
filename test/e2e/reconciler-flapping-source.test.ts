import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { Op, events, expectLegalHistory, getOperation, resetSandbox, statusPath, submit } from './dispatcher-helpers';

/**
 * A source whose reads flap. The reconciler's read of a charge whose answer was lost (UNKNOWN, never acknowledged)
 * found a record of it without its status field (inconclusive, read again); the next reads find nothing, up to date
 * (a replica that lost the record). "Not there" is then no proof that nothing happened: a read of this very effect
 * showed it. FAILED would say "no effect exists, a retry is safe", and the retry would charge the card again.
 */
describe('reconciler: a source that showed the effect and then does not', () => {
  let stack: Stack;
  beforeAll(async () => {
    // A budget the reads before absence is proof (about 3.5 s after the send here) do not spend.
    stack = await Stack.start({ label: 'rflap', env: { RECONCILE_BUDGET: '12' } });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => resetSandbox(stack));

  async function resolve(opId: string, status: string) {
    return http<Op & { type?: string; read_back?: unknown }>(stack.apiUrl, 'POST', `/v1/operations/${opId}/resolve`, {
      key: DEMO.reviewer,
      body: { status, evidence: `provider dashboard checked by the test: ${status}` },
    });
  }

  it('found without its status, then absent: held, never FAILED; a FAILED and a retry are refused; one charge', async () => {
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', count: 1 }],
      read_fault: 'field_missing',
    });
    const reference = unique('flap');
    const created = await submit(stack, [charge(reference)]);
    // The reconciler's read showed the charge (without its status): inconclusive, read again.
    const shown = await waitFor(
      () => events(stack, created.id),
      (log) =>
        log.some(
          (e) =>
            e.type === 'operation.status_changed' &&
            e.to_status === 'UNKNOWN' &&
            (e.data as { evidence?: { inconclusive?: string } }).evidence?.inconclusive === 'field_missing',
        ),
      20_000,
      50,
    );
    const opId = shown.find((e) => e.operation_id)!.operation_id!;
    // Then the replica answers, up to date, without any charge.
    await stack.setFaults({ read_fault: 'record_lost' });

    const settled = await waitFor(
      () => getOperation(stack, opId),
      (op) => op.status === 'FAILED' || op.status === 'MANUAL_REVIEW' || op.status === 'VERIFIED',
      45_000,
      150,
    );
    expect(settled.status).toBe('MANUAL_REVIEW');
    expect(settled.commit).toBe('unknown');
    // The read that showed it is kept on the hold, so a person's "did not happen" is refused whatever a read shows now.
    expect(settled.recovery_obligation).toMatchObject({
      effect_shown: { result: 'field_missing', evidence: expect.objectContaining({ record: expect.anything() }) },
    });
    expect(settled.permitted_resolutions).toEqual(['VERIFIED']);
    const refused = await resolve(opId, 'FAILED');
    expect(refused.status).toBe(409);
    expect(refused.body.type).toBe('https://verity.dev/problems/effect-exists');
    const retried = await http(stack.apiUrl, 'POST', `/v1/operations/${opId}/retry`, { key: DEMO.agent });
    expect(retried.status).toBe(409);

    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(statusPath(log, opId)).not.toContain('FAILED');
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });
});
