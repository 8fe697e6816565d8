import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { getExecution, resetSandbox, stackQueue, submit } from './dispatcher-helpers';

/**
 * Nothing lost, for the outcome too: a reviewer resolves the hold of a completed execution, and the advance job that
 * would judge its criteria again is lost (Redis down at the enqueue — tryEnqueue fails fast — or Redis restarted
 * empty). The sweeper owes it: an ended execution whose outcome still has a pending verdict for an operation that has
 * since become final gets an advance (red team round 7b: before, only executions still running did, and the outcome
 * stayed `pending` of a VERIFIED operation for good, the stream never ending `settled`).
 */
describe('outcome evaluation after a lost advance of a completed execution', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'outcomelost' });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => resetSandbox(stack));

  const view = (id: string) => getExecution(stack, id);

  /** The advances enqueued so far are lost (as when Redis restarts empty); then a dispatcher runs again. */
  async function loseAdvancesAndRestartDispatcher() {
    const queue = stackQueue(stack, 'executions');
    await queue.drain(true);
    await queue.close();
    await stack.startApp('dispatcher');
  }

  /** The execution once the sweeper's advance has judged its criteria again (no verdict left pending). */
  const evaluatedAgain = (id: string) =>
    waitFor(
      () => view(id),
      (e) => e.outcome?.result !== 'pending',
      30_000,
      150,
    );

  it('the sweeper owes the evaluation: the outcome follows the resolution', async () => {
    await stack.setFaults({ read_fault: 'field_missing' });
    const created = await submit(stack, [charge(unique('ol'))], {
      criteria: [{ key: 'paid', operation: 'charge', expect_status: 'VERIFIED' }],
    });
    const held = await waitFor(
      () => view(created.id),
      (e) => e.status === 'completed' && e.operations[0].status === 'MANUAL_REVIEW' && e.outcome !== null,
      45_000,
      150,
    );
    expect(held.outcome).toMatchObject({ result: 'pending' });
    await resetSandbox(stack);

    const [dispatcher] = stack.running('dispatcher');
    await stack.kill(dispatcher);
    const res = await http(stack.apiUrl, 'POST', `/v1/operations/${held.operations[0].id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'VERIFIED', evidence: 'provider dashboard shows the charge' },
    });
    expect(res.status).toBe(200);
    // The advance the resolution enqueued is lost (as when Redis restarts empty).
    await loseAdvancesAndRestartDispatcher();

    const after = await evaluatedAgain(created.id);
    expect(after.operations[0].status).toBe('VERIFIED');
    expect(after.outcome).toMatchObject({ result: 'satisfied' });
    expect(after.criteria_results).toMatchObject([{ key: 'paid', verdict: 'pass' }]);
  });

  it('an execution cancelled before its criteria were ever evaluated, whose advance was lost, is evaluated too', async () => {
    // No dispatcher: nothing evaluates the criteria before the cancel, and the jobs are then lost.
    const [dispatcher] = stack.running('dispatcher');
    await stack.kill(dispatcher);
    const created = await submit(stack, [charge(unique('ol-cancel'))], {
      criteria: [{ key: 'paid', operation: 'charge', expect_status: 'VERIFIED' }],
    });
    const cancelled = await http(stack.apiUrl, 'POST', `/v1/executions/${created.id}/cancel`, {
      key: DEMO.agent,
      body: { reason: 'the customer called it off' },
    });
    expect(cancelled.status).toBe(200);
    await loseAdvancesAndRestartDispatcher();

    // Its verdicts were shown pending (never evaluated); the sweeper owes the evaluation, and the outcome ends.
    const after = await evaluatedAgain(created.id);
    expect(after).toMatchObject({ status: 'cancelled', operations: [{ status: 'CANCELLED' }] });
    expect(after.outcome).toMatchObject({ result: 'unmet' });
    expect(after.criteria_results).toMatchObject([{ key: 'paid', verdict: 'fail' }]);
  });
});
