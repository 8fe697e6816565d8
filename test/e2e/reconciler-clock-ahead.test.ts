import { skewedClock } from '../support/skewed-clock';
import { Stack } from '../support/stack';
import { charge, unique } from '../support/http';
import { events, expectLegalHistory, resetSandbox, settle, statusPath, submit } from './dispatcher-helpers';

/** How far the reconciler's clock runs ahead of the database's: beyond the reconcile deadline (10 minutes). */
const AHEAD_MS = 15 * 60_000;

/**
 * An operation's times (sent_at, acknowledged_at) are written by the database. The reconciler measured how long ago
 * they were by its own clock: a host ahead took every UNKNOWN for one past its reconcile deadline and held it for a
 * person unread (a drop the source would have proven absent included), and would have recorded a proven absence as
 * a quarter of an hour after the send when it was seconds.
 */
describe('reconciler: a host clock ahead of the database', () => {
  let stack: Stack;
  let clock: ReturnType<typeof skewedClock> | undefined;
  beforeAll(async () => {
    clock = skewedClock();
    stack = await Stack.start({ label: 'rclockahead', reconcilers: 0 });
    await stack.startApp('reconciler', clock.env(AHEAD_MS));
  });
  afterAll(async () => {
    await stack?.stop();
    clock?.remove();
  });
  afterEach(async () => resetSandbox(stack));

  it('reconciles a fresh UNKNOWN from the source instead of holding it as past its deadline', async () => {
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', count: 1 }],
    });
    const reference = unique('rclock-timeout');
    const created = await submit(stack, [charge(reference)]);
    const [op] = (await settle(stack, created.id)).operations;
    expect(op).toMatchObject({ status: 'VERIFIED', terminal_reason: null });
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(statusPath(log, op.id)).toEqual(['PREPARED', 'SENT', 'UNKNOWN', 'RECONCILING', 'VERIFIED']);
  });

  it('records how long after the send an absence was proven by the database’s clock', async () => {
    await stack.setFaults({ rules: [{ method: 'POST', path: '/v1/charges', fault: 'drop_before_commit', count: 1 }] });
    const created = await submit(stack, [charge(unique('rclock-drop'))]);
    const [op] = (await settle(stack, created.id)).operations;
    expect(op).toMatchObject({ status: 'FAILED', terminal_reason: 'PROVEN_ABSENT' });
    const after = Number(op.evidence!.proven_absent_after_ms);
    expect(after).toBeGreaterThanOrEqual(500 + 1000 + 1500);
    // The whole test runs in seconds; the reconciler's clock is a quarter of an hour ahead.
    expect(after).toBeLessThan(60_000);
  });
});
