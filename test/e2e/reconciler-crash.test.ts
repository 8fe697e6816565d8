import { Stack, waitFor } from '../support/stack';
import { charge, unique } from '../support/http';
import {
  events,
  expectLegalHistory,
  markedOperations,
  resetSandbox,
  settle,
  statusPath,
  submit,
} from './dispatcher-helpers';

/**
 * I12: a reconciler SIGKILLed in the middle of a read-back (test-only hook TEST_PAUSE_BEFORE_READ_MS: it
 * logs "paused before read-back" and sleeps there) leaves its operation RECONCILING or ACKNOWLEDGED; the sweeper
 * re-enqueues the owed check and another reconciler settles it.
 */
describe('reconciler: killed mid-read', () => {
  let stack: Stack;
  beforeAll(async () => {
    // The first read-back is the reconciler's here (the dispatcher's read at send would settle it before the pause).
    stack = await Stack.start({ label: 'rcrash', reconcilers: 0, env: { VERIFY_AT_SEND: 'false' } });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => {
    await resetSandbox(stack);
    for (const app of stack.running('reconciler')) await stack.kill(app, 'SIGKILL');
  });

  async function killedMidRead(count: number) {
    const a = await stack.startApp('reconciler', { TEST_PAUSE_BEFORE_READ_MS: '60000' });
    return {
      a,
      paused: () =>
        waitFor(
          async () => markedOperations(a, 'paused before read-back'),
          (ids) => new Set(ids).size >= count,
          30_000,
          20,
        ),
    };
  }

  it('reconciliation (UNKNOWN → RECONCILING, then killed mid-read): another reconciler settles it, one effect', async () => {
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', count: 1 }],
    });
    const { a, paused } = await killedMidRead(1);
    const reference = unique('rc-reconcile');
    const created = await submit(stack, [charge(reference)]);
    const [opId] = await paused();
    const mid = (await stack.db.dataSource.query(`SELECT status FROM operations WHERE id = $1`, [opId])) as {
      status: string;
    }[];
    expect(mid[0].status).toBe('RECONCILING');
    await stack.kill(a, 'SIGKILL');
    await stack.startApp('reconciler');

    const execution = await settle(stack, created.id);
    expect(execution.operations[0].status).toBe('VERIFIED');
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(statusPath(log, opId)).toEqual(['PREPARED', 'SENT', 'UNKNOWN', 'RECONCILING', 'VERIFIED']);
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });

  it('verification (ACKNOWLEDGED, killed mid-read): another reconciler verifies it', async () => {
    const { a, paused } = await killedMidRead(2);
    const refs = [unique('rc-verify-a'), unique('rc-verify-b')];
    const created = await submit(stack, [charge(refs[0], { key: 'a' }), charge(refs[1], { key: 'b' })]);
    await paused();
    await stack.kill(a, 'SIGKILL');
    // Two reconcilers now, to also show that the re-enqueued checks are not processed twice.
    await stack.startApp('reconciler');
    await stack.startApp('reconciler');

    const execution = await settle(stack, created.id);
    expect(execution.operations.map((o) => o.status)).toEqual(['VERIFIED', 'VERIFIED']);
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    for (const op of execution.operations) {
      expect(statusPath(log, op.id)).toEqual(['PREPARED', 'SENT', 'ACKNOWLEDGED', 'VERIFIED']);
    }
    const effects = await stack.effects();
    for (const r of refs) expect(effects.charges[r].count).toBe(1);
  });
});
