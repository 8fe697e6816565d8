import { DEMO, Stack } from '../support/stack';
import { charge, http, unique } from '../support/http';
import {
  Op,
  events,
  expectLegalHistory,
  getOperation,
  resetSandbox,
  statusPath,
  submit,
  waitForOp,
  waitForResolutionPermitted,
} from './dispatcher-helpers';

/**
 * A reviewer's FAILED refused because the read made for it showed the effect (`409 effect-exists`) is a read of the
 * source like a re-check's: what it showed stays on the hold. Otherwise a source that then loses the record (a replica,
 * or reads that flap) let the next FAILED through — `commit: rejected`, retry `safe` — of a charge the reviewer's own
 * read had just shown.
 */
describe('reconciler: a reviewer’s read that showed the effect stays on the hold', () => {
  let stack: Stack;
  beforeAll(async () => {
    // No scheduled re-check between the two decisions (it would find the charge and verify it): the reviewer's reads
    // are the only reads of the hold here.
    stack = await Stack.start({
      label: 'rreadshown',
      env: { RECONCILE_BUDGET: '3', RECHECK_BACKOFF_MS: '600000', RECHECK_BACKOFF_MAX_MS: '600000' },
    });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => resetSandbox(stack));

  async function resolve(opId: string, status: string) {
    return http<Op & { type?: string; read_back?: { kind: string } }>(
      stack.apiUrl,
      'POST',
      `/v1/operations/${opId}/resolve`,
      { key: DEMO.reviewer, body: { status, evidence: `provider dashboard checked by the test: ${status}` } },
    );
  }

  it('found by the reviewer’s read, then absent: a second FAILED is refused too, and FAILED is no longer offered', async () => {
    // Taken by the provider, the answer lost, reads down since: held SOURCE_UNREACHABLE, nothing on file.
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', count: 1 }],
      read_fault: 'unavailable',
    });
    const reference = unique('rrs');
    const created = await submit(stack, [charge(reference)]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect(held).toMatchObject({ terminal_reason: 'SOURCE_UNREACHABLE', acknowledged_at: null });
    await waitForResolutionPermitted(stack, held.id, 'FAILED');

    // The source answers again and shows the charge: the reviewer's FAILED is refused.
    await resetSandbox(stack);
    const first = await resolve(held.id, 'FAILED');
    expect(first.status).toBe(409);
    expect(first.body).toMatchObject({
      type: 'https://verity.dev/problems/effect-exists',
      read_back: { kind: 'found' },
    });
    // What that read showed is kept on the hold: FAILED is offered no more.
    const after = await getOperation(stack, held.id);
    expect(after).toMatchObject({
      status: 'MANUAL_REVIEW',
      permitted_resolutions: ['VERIFIED'],
      recovery_obligation: {
        effect_shown: { result: 'found', evidence: expect.objectContaining({ record: expect.anything() }) },
        permitted_actions: ['VERIFIED'],
      },
    });

    // Then the source answers, up to date, without the charge (it lost the record).
    await stack.setFaults({ read_fault: 'record_lost' });
    const second = await resolve(held.id, 'FAILED');
    expect(second.status).toBe(409);
    expect(second.body.type).toBe('https://verity.dev/problems/effect-exists');
    const retried = await http(stack.apiUrl, 'POST', `/v1/operations/${held.id}/retry`, { key: DEMO.agent });
    expect(retried.status).toBe(409);

    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(statusPath(log, held.id)).not.toContain('FAILED');
    expect(log.filter((e) => e.type === 'operation.rechecked' && e.operation_id === held.id)).toEqual([
      expect.objectContaining({
        data: expect.objectContaining({ trigger: 'resolution', result: 'found', requested_by: expect.any(String) }),
      }),
    ]);
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });
});
