import { skewedClock } from '../support/skewed-clock';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { events, expectLegalHistory, getExecution, submit } from './dispatcher-helpers';

/** How far the dispatcher's clock runs ahead of the database's here: more than a grant lasts. */
const AHEAD_MS = 120_000;
const TTL_MS = 60_000;

/**
 * A grant's expires_at is written by the database's clock (APPROVAL_TTL_MS after the decision), and the SENT statement
 * compares it with that clock. The dispatcher re-validates the grant before it sends: judged by a host clock that runs
 * ahead, a grant the database still holds valid was "expired" — withdrawn (`approval.stale_authority`) and asked for
 * again, every time a reviewer approved, so the operation was never sent.
 */
describe('dispatcher: a grant judged by the database’s clock', () => {
  let stack: Stack;
  let clock: ReturnType<typeof skewedClock> | undefined;
  beforeAll(async () => {
    clock = skewedClock();
    stack = await Stack.start({ label: 'clockgrant', dispatchers: 0, env: { APPROVAL_TTL_MS: String(TTL_MS) } });
    await stack.startApp('dispatcher', clock.env(AHEAD_MS));
  });
  afterAll(async () => {
    await stack?.stop();
    clock?.remove();
  });

  it('a grant within its TTL by the database’s clock is not withdrawn by a dispatcher whose clock runs ahead', async () => {
    const reference = unique('clock-grant');
    const created = await submit(stack, [charge(reference, { requires_approval: true })], { deadline_seconds: 600 });
    const waiting = await waitFor(
      () => getExecution(stack, created.id),
      (e) => e.status === 'waiting_for_approval' && e.operations[0].approval?.state === 'requested',
      30_000,
      100,
    );
    const [op] = waiting.operations;
    const approved = await http(stack.apiUrl, 'POST', `/v1/operations/${op.id}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'approve', reason: 'checked by the test' },
    });
    expect(approved.status).toBe(200);
    // Either the send (completed) or the grant withdrawn and asked for again (the approval back to requested).
    const settled = await waitFor(
      () => getExecution(stack, created.id),
      (e) =>
        ['completed', 'failed', 'cancelled', 'expired'].includes(e.status) ||
        e.operations[0].approval?.state === 'requested',
      30_000,
      150,
    );
    const log = await events(stack, created.id);
    expect(log.filter((e) => e.type === 'approval.stale_authority')).toEqual([]);
    expect(settled.status).toBe('completed');
    expect(settled.operations[0].status).toBe('VERIFIED');
    expectLegalHistory(log);
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });
});
