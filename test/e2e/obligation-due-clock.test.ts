import type { ProblemDetails as Problem } from '@verity/sdk';
import { skewedClock } from '../support/skewed-clock';
import { DEMO, Stack } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { Op, events, resetSandbox, submit, waitForOp } from './dispatcher-helpers';

/** How far behind the database's clock every app's host clock runs: longer than an obligation is given here. */
const BEHIND_MS = 10 * 60_000;
/** How long a hold may stay open before it is escalated (the stack's OBLIGATION_DUE_MS). */
const DUE_MS = 5 * 60_000;

/**
 * A recovery obligation's due time is compared with the database's clock: the sweeper escalates an obligation whose
 * `due_at` is before `now()`. It was written from the host clock of whoever held the operation (the reconciler, the
 * dispatcher) or re-dated it (the API, for a reviewer's "still unknown"): a host behind by more than the due time wrote
 * an obligation overdue the moment it was made — escalated to the on-call target at the next sweep, and a reviewer's
 * "give it five more minutes" undone at once; a host ahead gave the person that much longer before anyone was told.
 */
describe('recovery obligations: due by the database’s clock, whatever the host’s', () => {
  let stack: Stack;
  let clock: ReturnType<typeof skewedClock> | undefined;
  beforeAll(async () => {
    clock = skewedClock();
    stack = await Stack.start({
      label: 'obligationclock',
      apis: 0,
      dispatchers: 0,
      reconcilers: 0,
      env: { OBLIGATION_DUE_MS: String(DUE_MS) },
    });
    stack.apiUrl = await stack.startApi(clock.env(-BEHIND_MS));
    await stack.startApp('dispatcher', clock.env(-BEHIND_MS));
    await stack.startApp('reconciler', clock.env(-BEHIND_MS));
  });
  afterAll(async () => {
    await stack?.stop();
    clock?.remove();
  });
  afterEach(async () => resetSandbox(stack));

  const databaseNow = () => stack.databaseNow();

  /** Due about DUE_MS (or `dueMs`) after the database's now when it was written, and not escalated after two sweeps. */
  async function expectDueAhead(executionId: string, opId: string, dueMs = DUE_MS): Promise<void> {
    await stack.sweepsPassed(2);
    const op = (await waitForOp(stack, executionId, 'charge', (o) => o.id === opId)) as Op;
    const due = Date.parse(String(op.recovery_obligation!.due_at));
    const now = await databaseNow();
    expect(due).toBeGreaterThan(now + dueMs - 60_000);
    expect(due).toBeLessThanOrEqual(now + dueMs);
    expect(op.recovery_obligation!.escalated_at).toBeNull();
    expect((await events(stack, executionId)).filter((e) => e.type === 'obligation.escalated')).toEqual([]);
  }

  it('a hold the reconciler makes (the source unreachable) is due after the due time, not overdue at once', async () => {
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'drop_before_commit', count: 1 }],
      read_fault: 'unavailable',
    });
    const created = await submit(stack, [charge(unique('due-reconciler'))]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect(held.terminal_reason).toBe('SOURCE_UNREACHABLE');
    await expectDueAhead(created.id, held.id);
  });

  it('a hold the dispatcher makes (a knowledge conflict) is due after the due time, not overdue at once', async () => {
    const created = await submit(stack, [charge(unique('due-dispatcher'), { expected_state: { charged: true } })]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    expect(held.terminal_reason).toBe('KNOWLEDGE_CONFLICT');
    await expectDueAhead(created.id, held.id);
  });

  it('a reviewer’s “still unknown” re-dates the obligation from the database’s now, not the API host’s', async () => {
    const created = await submit(stack, [charge(unique('due-api'), { expected_state: { charged: true } })]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    const kept = await http<Op | Problem>(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'MANUAL_REVIEW', evidence: 'asked the provider; no answer yet', due_in_seconds: 300 },
    });
    expect(kept.status).toBe(200);
    await expectDueAhead(created.id, held.id, 300_000);
  });
  it('a resolution is dated by the database’s clock: never before the hold it resolves', async () => {
    const created = await submit(stack, [charge(unique('resolved-at'), { expected_state: { charged: true } })]);
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    const resolved = await http<Op>(stack.apiUrl, 'POST', `/v1/operations/${held.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'CANCELLED', evidence: 'the agent was wrong about the order; not wanted any more' },
    });
    expect(resolved.status).toBe(200);
    const log = await events(stack, created.id);
    const heldAt = Date.parse(
      log.find((e) => e.operation_id === held.id && e.to_status === 'MANUAL_REVIEW')!.created_at,
    );
    const resolution = log.find((e) => e.type === 'operation.resolved')!.data as { at: string };
    expect(Date.parse(resolution.at)).toBeGreaterThanOrEqual(heldAt);
    expect(Date.parse(resolution.at)).toBeLessThanOrEqual(await databaseNow());
  });
});
