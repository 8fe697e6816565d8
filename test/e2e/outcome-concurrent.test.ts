import { TransitionService, findExecutionForWorker, findOperationsForWorker } from '@verity/persistence';
import { OutcomeService } from '../../apps/dispatcher/src/outcome.service';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { Event, events, getExecution, resetSandbox, stackQueue, submit } from './dispatcher-helpers';

interface CriterionResult {
  key: string;
  verdict: string;
  rationale: string;
}
type ExecutionView = Awaited<ReturnType<typeof getExecution>> & {
  outcome: { result: string } | null;
  criteria_results: CriterionResult[] | null;
};

/**
 * Criteria are judged again on every advance of an execution, and advances of one execution run side by side (they
 * have no job id that would serialize them; a completed execution's are each a reviewer's resolution). An evaluation
 * made from operations read before the last resolution must never be what the execution keeps: the stored outcome
 * would say "pending" of an operation that is VERIFIED, for good — nothing advances a completed execution again, and
 * its stream waits for an outcome that agrees with its operations.
 */
describe('outcome evaluation: concurrent evaluators of one execution', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'outcomerace' });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => resetSandbox(stack));

  const view = async (id: string) => (await getExecution(stack, id)) as ExecutionView;
  const resolveVerified = async (operationId: string) => {
    const res = await http(stack.apiUrl, 'POST', `/v1/operations/${operationId}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'VERIFIED', evidence: 'provider dashboard shows the charge' },
    });
    expect(res.status).toBe(200);
  };

  it('an evaluation from an older read loses to a newer one: the outcome never goes back to pending', async () => {
    // Two charges held for a human (their read shows no status field); the execution completes, the outcome pending.
    await stack.setFaults({ read_fault: 'field_missing' });
    const created = await submit(stack, [charge(unique('or-a'), { key: 'a' }), charge(unique('or-b'), { key: 'b' })], {
      criteria: [
        { key: 'a-paid', operation: 'a', expect_status: 'VERIFIED' },
        { key: 'b-paid', operation: 'b', expect_status: 'VERIFIED' },
      ],
    });
    const held = await waitFor(
      () => view(created.id),
      (e) =>
        e.status === 'completed' &&
        e.operations.every((o) => o.status === 'MANUAL_REVIEW') &&
        e.criteria_results?.every((r) => (r.rationale ?? '').includes('MANUAL_REVIEW')) === true,
      45_000,
      150,
    );
    expect(held.outcome).toMatchObject({ result: 'pending' });
    await resetSandbox(stack);

    // The advance jobs the resolutions enqueue are run below, by hand, in the order a race can run them.
    const [dispatcher] = stack.running('dispatcher');
    await stack.kill(dispatcher);
    const [a, b] = held.operations;
    const db = stack.db.dataSource.manager;
    const readNow = async () => ({
      execution: (await findExecutionForWorker(db, created.id))!,
      operations: await findOperationsForWorker(db, created.id),
    });

    // Advance job 1 (a's resolution) reads the execution: a VERIFIED, b still held, the stored verdicts both pending.
    await resolveVerified(a.id);
    const first = await readNow();
    // Meanwhile b is resolved, and advance job 2 reads and records its evaluation first: both pass.
    await resolveVerified(b.id);
    const second = await readNow();
    const outcomes = new OutcomeService(stack.db.dataSource, new TransitionService());
    expect(await outcomes.evaluate(second.execution, second.operations, 0)).toBe(true);
    expect((await view(created.id)).outcome).toMatchObject({ result: 'satisfied' });

    // Advance job 1 now records what it judged from its older read.
    await outcomes.evaluate(first.execution, first.operations, 0);

    // The jobs run by hand are gone from the queue; with the dispatcher back, nothing else evaluates again.
    const queue = stackQueue(stack, 'executions');
    await queue.drain(true);
    await queue.close();
    await stack.startApp('dispatcher');
    await stack.sweepsPassed(2);

    const after = await view(created.id);
    expect(after.operations.map((o) => o.status)).toEqual(['VERIFIED', 'VERIFIED']);
    expect(after.criteria_results!.map((r) => [r.key, r.verdict])).toEqual([
      ['a-paid', 'pass'],
      ['b-paid', 'pass'],
    ]);
    expect(after.outcome).toMatchObject({ result: 'satisfied' });
    // The log's last evaluation agrees: no "pending" written after "satisfied".
    const evaluated = (await events(stack, created.id)).filter((e: Event) => e.type === 'outcome.evaluated');
    expect(evaluated.at(-1)!.data).toMatchObject({ result: 'satisfied' });
  });
});
