import { Stack } from '../support/stack';
import { charge, unique } from '../support/http';
import { QueueName } from '@verity/queues';
import { events, expectLegalHistory, logLines, settle, stackQueue, statusPath, submit } from './dispatcher-helpers';

/**
 * An operation left SENT is swept to UNKNOWN when no live job holds it. Its event said "left SENT by a worker that
 * stopped" — also when no worker stopped: the dispatcher that sent it is running, got the provider's answer, and only
 * the write of that answer failed (here a trigger refuses SENT → ACKNOWLEDGED). The record then states a crash that
 * never happened, and a person on call looks for one. The sweeper cannot tell the two apart; the event says so.
 */
describe('an operation left SENT by a send job that failed to record the answer', () => {
  let stack: Stack;
  beforeAll(async () => {
    // Dispatch jobs send (not the execution's advance job, which BullMQ runs again): a failed one is not re-run.
    stack = await Stack.start({ label: 'sentlabel', env: { SEND_IN_ADVANCE: 'false' } });
    await stack.db.dataSource.query(`
      CREATE FUNCTION refuse_acknowledged() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'acknowledgement refused for the test'; END $$`);
    await stack.db.dataSource.query(`
      CREATE TRIGGER refuse_acknowledged BEFORE UPDATE ON operations FOR EACH ROW
      WHEN (OLD.status = 'SENT' AND NEW.status = 'ACKNOWLEDGED') EXECUTE FUNCTION refuse_acknowledged()`);
  });
  afterAll(async () => stack?.stop());

  it('is swept to UNKNOWN with a detail that does not claim a worker stopped; the dispatcher still runs', async () => {
    const created = await submit(stack, [charge(unique('sentlabel'))]);
    const execution = await settle(stack, created.id, 60_000);
    const log = await events(stack, created.id);
    expectLegalHistory(log);
    const op = execution.operations[0];
    expect(statusPath(log, op.id).slice(0, 3)).toEqual(['PREPARED', 'SENT', 'UNKNOWN']);
    const swept = log.find((e) => e.operation_id === op.id && e.to_status === 'UNKNOWN')!;
    expect(swept.data).toMatchObject({ job_state: 'no live job' });
    expect(String(swept.data.detail)).toMatch(/^left SENT with no live job: its worker stopped, or its job ended/);
    expect(String(swept.data.detail)).not.toContain('by a worker that stopped');
    // No worker stopped: the one dispatcher is the one that sent it.
    const dispatchers = stack.running('dispatcher');
    expect(dispatchers).toHaveLength(1);
    expect(dispatchers[0].child.exitCode).toBeNull();
    // The answer it could not record is in its log, with the provider's reference to look the charge up by.
    const lost = logLines(dispatchers[0]).filter((line) => String(line.msg).startsWith('the provider answered but'));
    expect(lost).toEqual([
      expect.objectContaining({
        operationId: op.id,
        outcome: 'ACKNOWLEDGED',
        providerRef: expect.objectContaining({ id: expect.stringMatching(/^ch_/) }),
      }),
    ]);
    // Its send job ended failed, in that running worker, on the refused write of the provider's answer.
    const queue = stackQueue(stack, QueueName.DISPATCH);
    try {
      const failed = await queue.getFailed();
      expect(failed.map((job) => [job.data.operationId, job.failedReason])).toEqual([
        [op.id, expect.stringContaining('acknowledgement refused for the test')],
      ]);
    } finally {
      await queue.close();
    }
  }, 90_000);
});
