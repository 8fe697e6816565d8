import { TransitionService, findExecutionForWorker, findOperationsForWorker } from '@verity/persistence';
import { OutcomeService } from '../../apps/dispatcher/src/outcome.service';
import { Stack } from '../support/stack';
import {
  Event,
  events,
  getExecution,
  heldPairAwaitingOutcome,
  resetSandbox,
  resolveVerified,
  stackQueue,
} from './dispatcher-helpers';

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

  it('an evaluation from an older read loses to a newer one: the outcome never goes back to pending', async () => {
    // Two charges held for a human; the execution completes, the outcome pending. The advance jobs the resolutions
    // enqueue are run below, by hand (the dispatcher is stopped), in the order a race can run them.
    const held = await heldPairAwaitingOutcome(stack, 'or');
    expect(held.outcome).toMatchObject({ result: 'pending' });
    const [a, b] = held.operations;
    const db = stack.db.dataSource.manager;
    const readNow = async () => ({
      execution: (await findExecutionForWorker(db, held.id))!,
      operations: await findOperationsForWorker(db, held.id),
    });

    // Advance job 1 (a's resolution) reads the execution: a VERIFIED, b still held, the stored verdicts both pending.
    await resolveVerified(stack, a.id);
    const first = await readNow();
    // Meanwhile b is resolved, and advance job 2 reads and records its evaluation first: both pass.
    await resolveVerified(stack, b.id);
    const second = await readNow();
    const outcomes = new OutcomeService(stack.db.dataSource, new TransitionService());
    expect(await outcomes.evaluate(second.execution, second.operations, 0)).toBe(true);
    expect((await view(held.id)).outcome).toMatchObject({ result: 'satisfied' });

    // Advance job 1 now records what it judged from its older read.
    await outcomes.evaluate(first.execution, first.operations, 0);

    // The jobs run by hand are gone from the queue; with the dispatcher back, nothing else evaluates again.
    const queue = stackQueue(stack, 'executions');
    await queue.drain(true);
    await queue.close();
    await stack.startApp('dispatcher');
    await stack.sweepsPassed(2);

    const after = await view(held.id);
    expect(after.operations.map((o) => o.status)).toEqual(['VERIFIED', 'VERIFIED']);
    expect(after.criteria_results!.map((r) => [r.key, r.verdict])).toEqual([
      ['a-paid', 'pass'],
      ['b-paid', 'pass'],
    ]);
    expect(after.outcome).toMatchObject({ result: 'satisfied' });
    // The log's last evaluation agrees: no "pending" written after "satisfied".
    const evaluated = (await events(stack, held.id)).filter((e: Event) => e.type === 'outcome.evaluated');
    expect(evaluated.at(-1)!.data).toMatchObject({ result: 'satisfied' });
  });
});
