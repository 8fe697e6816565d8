import { skewedClock } from '../support/skewed-clock';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { ended, events, expectLegalHistory, getExecution, submit } from './dispatcher-helpers';

/** How far the dispatcher's clock runs ahead of the database's here. */
const AHEAD_MS = 120_000;

/**
 * The deadline is a time on the database's clock (deadline_at, written by it; the send guard and the sweeper judge it
 * with clock_timestamp()). A dispatcher host whose clock runs ahead must not expire an execution whose deadline has
 * not passed: "expired, deadline passed" would be a claim the record cannot back, and the operations it cancels with
 * it (an approval the reviewer was about to give) are never sent.
 */
describe('dispatcher: a host clock ahead of the database', () => {
  let stack: Stack;
  let clock: ReturnType<typeof skewedClock> | undefined;
  beforeAll(async () => {
    clock = skewedClock();
    stack = await Stack.start({ label: 'clockahead', dispatchers: 0 });
    await stack.startApp('dispatcher', clock.env(AHEAD_MS));
  });
  afterAll(async () => {
    await stack?.stop();
    clock?.remove();
  });

  it('does not expire an execution before its deadline; it waits for approval and completes once approved', async () => {
    const reference = unique('clock-ahead');
    // A deadline well inside the dispatcher's skew, well outside the test.
    const created = await submit(stack, [charge(reference, { requires_approval: true })], { deadline_seconds: 60 });
    const waiting = await waitFor(
      () => getExecution(stack, created.id),
      (e) => e.status === 'waiting_for_approval' || e.status === 'expired',
      30_000,
      100,
    );
    expect(waiting.status).toBe('waiting_for_approval');
    expect(Date.parse(waiting.deadline_at)).toBeGreaterThan(Date.now());

    const [op] = waiting.operations;
    // The request is stamped by the database's clock, as the decision is: asked for before it was answered, not two
    // minutes after (the console showed it "requested in 2 minutes").
    const requestedAt = Date.parse(String(op.approval?.requested_at));
    expect(requestedAt).toBeLessThanOrEqual(await stack.databaseNow());
    const approved = await http<typeof op>(stack.apiUrl, 'POST', `/v1/operations/${op.id}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'approve', reason: 'checked by the test', requested_at: op.approval?.requested_at },
    });
    expect(approved.status).toBe(200);
    expect(Date.parse(String(approved.body.approval?.decided_at))).toBeGreaterThanOrEqual(requestedAt);
    const done = await ended(stack, created.id, 30_000);
    expect(done.status).toBe('completed');
    expect(done.operations[0].status).toBe('VERIFIED');
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(log.some((e) => e.type === 'execution.status_changed' && e.to_status === 'expired')).toBe(false);
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });

  it('reads an unreadable precondition again before its deadline, rather than holding it as if the deadline had come', async () => {
    await stack.setFaults({ read_fault: 'unavailable' });
    try {
      const reference = unique('clock-ahead-read');
      const created = await submit(stack, [charge(reference, { expected_state: { charged: false } })], {
        deadline_seconds: 60,
      });
      const opId = created.operations[0].id;
      const unread = (l: Awaited<ReturnType<typeof events>>) =>
        l.filter((e) => e.type === 'context.unavailable' && e.operation_id === opId);
      const log = await waitFor(
        () => events(stack, created.id),
        (l) => unread(l).length >= 2 || unread(l).some((e) => 'held' in (e.data ?? {})),
        30_000,
        100,
      );
      const [first, second] = unread(log);
      // The next read (a fraction of a second later) comes well before a deadline a minute away by the database's
      // clock, and is made when it said, by that clock (not at once: the backoff holds on a host ahead of it too).
      expect(first.data).toMatchObject({ failed_reads: 1, next_read_at: expect.any(String) });
      expect(first.data).not.toHaveProperty('held');
      const nextReadAt = Date.parse((first.data as { next_read_at: string }).next_read_at);
      expect(nextReadAt).toBeLessThan(Date.parse(created.deadline_at));
      expect(nextReadAt).toBeLessThan(Date.parse(first.created_at) + 5_000);
      expect(second.data).toMatchObject({ failed_reads: 2 });
      expect(Date.parse(second.created_at)).toBeGreaterThanOrEqual(nextReadAt - 50);
    } finally {
      await stack.setFaults({ read_fault: null });
    }
  });
});
