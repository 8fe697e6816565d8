import { TransitionService, findExecutionForWorker, findOperationsForWorker } from '@verity/persistence';
import { OutcomeService } from '../../apps/dispatcher/src/outcome.service';
import { Stack } from '../support/stack';
import { Event, events, heldPairAwaitingOutcome, resolveVerified } from './dispatcher-helpers';

interface CriterionResult {
  key: string;
  verdict: string;
  rationale: string;
  evidence_event_ids: string[];
}

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

  it('never writes a verdict whose evidence is a move to another status than the one it judged', async () => {
    // Two charges held for a human; the execution completes, the outcome pending. The advance the resolutions enqueue
    // is run below, by hand (the dispatcher is stopped): it reads, then b is resolved, then it judges.
    const held = await heldPairAwaitingOutcome(stack, 'moved');
    const [a, b] = held.operations;
    await resolveVerified(stack, a.id);
    const db = stack.db.dataSource.manager;
    const execution = (await findExecutionForWorker(db, held.id))!;
    const operations = await findOperationsForWorker(db, held.id);
    expect(operations.map((o) => o.status)).toEqual(['VERIFIED', 'MANUAL_REVIEW']);
    await resolveVerified(stack, b.id);

    const outcomes = new OutcomeService(stack.db.dataSource, new TransitionService());
    await outcomes.evaluate(execution, operations, 0);

    const log = await events(stack, held.id);
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
