import { Stack, waitFor } from '../support/stack';
import { charge, unique } from '../support/http';
import {
  events,
  expectLegalHistory,
  getExecution,
  logLines,
  waitForMarkers,
  settle,
  stackQueue,
  statusPath,
  submit,
} from './dispatcher-helpers';

const dispatchJobOf = async (stack: Stack, operationId: string) => {
  const queue = stackQueue(stack, 'dispatch');
  try {
    return await queue.getJob(`${operationId}.dispatch`);
  } finally {
    await queue.close();
  }
};

/**
 * One BullMQ job per operation on the happy path (SEND_IN_ADVANCE, on by default): the advance job that finds
 * operations ready sends them itself, side by side, instead of enqueueing dispatch jobs. The sweeper counts a locked
 * advance job as a live sender, exactly as it counts a locked dispatch job.
 */
describe('dispatcher: the advance job sends a ready operation itself', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'sendadv' });
  });
  afterAll(async () => stack?.stop());

  it('a lone charge is sent, verified and completed with no dispatch job', async () => {
    const reference = unique('sendadv');
    const created = await submit(stack, [charge(reference)]);
    const done = await settle(stack, created.id);
    expect(done.status).toBe('completed');
    const op = done.operations[0];
    expect(op.status).toBe('VERIFIED');
    expect(await dispatchJobOf(stack, op.id)).toBeUndefined();
    // The operator still finds one "dispatch" line per send.
    const [dispatcher] = stack.running('dispatcher');
    expect(logLines(dispatcher).filter((l) => l.msg === 'dispatch' && l.operationId === op.id)).toEqual([
      expect.objectContaining({ outcome: 'sent' }),
    ]);
    expect(statusPath(await events(stack, created.id), op.id)).toEqual([
      'PREPARED',
      'SENT',
      'ACKNOWLEDGED',
      'VERIFIED',
    ]);
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });

  it('two charges ready at once are both sent by the advance job, side by side, with no dispatch job', async () => {
    const refs = [unique('sendadv-a'), unique('sendadv-b')];
    const created = await submit(stack, [charge(refs[0], { key: 'a' }), charge(refs[1], { key: 'b' })]);
    const done = await settle(stack, created.id);
    expect(done.operations.map((o) => o.status)).toEqual(['VERIFIED', 'VERIFIED']);
    const jobs = await Promise.all(done.operations.map((o) => dispatchJobOf(stack, o.id)));
    expect(jobs).toEqual([undefined, undefined]);
    const effects = await stack.effects();
    expect(refs.map((ref) => effects.charges[ref].count)).toEqual([1, 1]);
    expect(effects.duplicates).toEqual([]);
  });
});

describe('sweeper: a locked advance job is a live sender', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'sendadvlive', dispatchers: 0 });
  });
  afterAll(async () => stack?.stop());

  it('its SENT operation is left alone past the lock window while the job holds its lock, then sent once', async () => {
    // Paused after SENT for longer than DISPATCH_LOCK_MS + SEND_GRACE_MS (3.5 s in tests), alive and renewing its lock.
    const dispatcher = await stack.startApp('dispatcher', { TEST_PAUSE_AFTER_SENT_MS: '8000' });
    const reference = unique('sendadv-live');
    const created = await submit(stack, [charge(reference)]);
    const [opId] = await waitForMarkers(dispatcher, 'paused after SENT');
    // Two whole sweeps that began after the orphan threshold had passed for this operation.
    await waitFor(
      async () =>
        (
          (await stack.db.dataSource.query(
            `SELECT count(*)::int AS n FROM sweep_log, operations o
             WHERE o.id = $1 AND sweep_log.started_at > o.sent_at + interval '3500 milliseconds'
               AND sweep_log.finished_at IS NOT NULL`,
            [opId],
          )) as { n: number }[]
        )[0].n,
      (n) => n >= 2,
      30_000,
      100,
    );
    expect((await getExecution(stack, created.id)).operations[0].status).toBe('SENT');

    const done = await settle(stack, created.id);
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    expect(statusPath(log, opId)).toEqual(['PREPARED', 'SENT', 'ACKNOWLEDGED', 'VERIFIED']);
    expect(done.status).toBe('completed');
    expect((await stack.effects()).charges[reference].count).toBe(1);
  });
});
