import { TransitionService, findExecutionForWorker, findOperationsForWorker } from '@verity/persistence';
import { OutcomeService } from '../../apps/dispatcher/src/outcome.service';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { Event, events, getExecution, resetSandbox, submit } from './dispatcher-helpers';

interface CriterionResult {
  key: string;
  verdict: string;
  rationale: string;
  evidence_event_ids: string[];
}
type ExecutionView = Awaited<ReturnType<typeof getExecution>> & { criteria_results: CriterionResult[] | null };

/**
 * An advance judges the criteria from the operations it read, and the evidence of each verdict (the move that put the
 * operation where it stands) from a read of the log made after them, by a statement of its own. A resolution committed
 * between the two was written as a verdict on the status read ("pending: MANUAL_REVIEW and can still move") whose
 * evidence is the resolution's move to VERIFIED: an `outcome.evaluated` event (and its webhook) that contradicts itself.
 * The evaluation made from such a read judges again from a read of now.
 */
describe('outcome evaluation: an operation that moved after it was read', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'outcomemoved' });
  });
  afterAll(async () => stack?.stop());

  const view = async (id: string) => (await getExecution(stack, id)) as ExecutionView;
  const resolveVerified = async (operationId: string) => {
    const res = await http(stack.apiUrl, 'POST', `/v1/operations/${operationId}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'VERIFIED', evidence: 'provider dashboard shows the charge' },
    });
    expect(res.status).toBe(200);
  };

  it('never writes a verdict whose evidence is a move to another status than the one it judged', async () => {
    // Two charges held for a human (their read shows no status field); the execution completes, the outcome pending.
    await stack.setFaults({ read_fault: 'field_missing' });
    const created = await submit(
      stack,
      [charge(unique('moved-a'), { key: 'a' }), charge(unique('moved-b'), { key: 'b' })],
      {
        criteria: [
          { key: 'a-paid', operation: 'a', expect_status: 'VERIFIED' },
          { key: 'b-paid', operation: 'b', expect_status: 'VERIFIED' },
        ],
      },
    );
    const held = await waitFor(
      () => view(created.id),
      (e) =>
        e.status === 'completed' &&
        e.operations.every((o) => o.status === 'MANUAL_REVIEW') &&
        e.criteria_results?.every((r) => (r.rationale ?? '').includes('MANUAL_REVIEW')) === true,
      45_000,
      150,
    );
    await resetSandbox(stack);
    // The advance the resolutions enqueue is run below, by hand: it reads, then b is resolved, then it judges.
    const [dispatcher] = stack.running('dispatcher');
    await stack.kill(dispatcher);
    const [a, b] = held.operations;
    await resolveVerified(a.id);
    const db = stack.db.dataSource.manager;
    const execution = (await findExecutionForWorker(db, created.id))!;
    const operations = await findOperationsForWorker(db, created.id);
    expect(operations.map((o) => o.status)).toEqual(['VERIFIED', 'MANUAL_REVIEW']);
    await resolveVerified(b.id);

    const outcomes = new OutcomeService(stack.db.dataSource, new TransitionService());
    await outcomes.evaluate(execution, operations, 0);

    const log = await events(stack, created.id);
    const evaluated = log.filter((e: Event) => e.type === 'outcome.evaluated').at(-1)!;
    const written = (evaluated.data as { criteria: CriterionResult[] }).criteria;
    // Each verdict's evidence is the move to the status it judged: VERIFIED for a pass, never for a pending.
    const movedTo = (id: string) => log.find((e: Event) => e.id === id)?.to_status;
    expect(written.map((c) => [c.key, c.verdict, movedTo(c.evidence_event_ids[0])])).toEqual([
      ['a-paid', 'pass', 'VERIFIED'],
      ['b-paid', 'pass', 'VERIFIED'],
    ]);
  });
});
