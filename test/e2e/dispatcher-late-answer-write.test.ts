import { Stack, waitFor } from '../support/stack';
import { sms, unique } from '../support/http';
import {
  events,
  expectLegalHistory,
  getOperation,
  submit,
  waitForLog,
  waitForMarkers,
  waitForOp,
} from './dispatcher-helpers';

/**
 * A provider's 2xx that comes back after the sweeper marked the send UNKNOWN is recorded on the operation
 * (`acknowledged_at`, an `operation.acknowledged_late` event): it is what keeps a person's FAILED, and a retry, from
 * standing for a message the provider took. That write was made once: when Postgres cut the session at that moment,
 * the 2xx was only in the dispatcher's log, and the hold said a person might call it FAILED. It is now written again
 * like the send's own answer, and a try whose reply was lost is not written a second time (its status unchanged, an
 * annotation's compare-and-set would let it through again).
 */
describe('a late acknowledgement whose write fails', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'lateackwrite', dispatchers: 0 });
  });
  afterAll(async () => stack?.stop());
  afterEach(async () => {
    for (const app of stack.running('dispatcher')) {
      app.child.kill('SIGCONT');
      await stack.kill(app, 'SIGKILL');
    }
    await stack.db.dataSource.query('DROP TRIGGER IF EXISTS late_ack_fault ON operations');
  });

  /** A trigger on the write of a late acknowledgement (acknowledged_at set on an operation no longer SENT). */
  async function onLateAcknowledgement(body: string) {
    await stack.db.dataSource.query(`
      CREATE OR REPLACE FUNCTION late_ack_fault() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN ${body} RETURN NEW; END $$`);
    await stack.db.dataSource.query(`
      CREATE TRIGGER late_ack_fault BEFORE UPDATE ON operations FOR EACH ROW
      WHEN (OLD.status <> 'SENT' AND OLD.acknowledged_at IS NULL AND NEW.acknowledged_at IS NOT NULL)
      EXECUTE FUNCTION late_ack_fault()`);
  }

  /** An SMS whose dispatcher is frozen after its call until the sweeper has held it; then its 2xx comes back. */
  async function lateAcknowledgement(label: string) {
    const dispatcher = await stack.startApp('dispatcher', {
      TEST_PAUSE_AFTER_CALL_MS: '5000',
      DATABASE_QUERY_TIMEOUT_MS: '1500',
    });
    const created = await submit(stack, [sms(unique(label))]);
    const [opId] = await waitForMarkers(dispatcher, 'paused after call', 1);
    dispatcher.child.kill('SIGSTOP');
    await waitForOp(stack, created.id, 'notify', (o) => o.status === 'MANUAL_REVIEW');
    dispatcher.child.kill('SIGCONT');
    await waitForLog(dispatcher, (l) => l.msg === 'late send outcome rejected by CAS' && l.operationId === opId);
    return { executionId: created.id, opId, dispatcher };
  }

  it('Postgres cuts the session writing it: written again, on file before a person decides', async () => {
    // Once (a sequence is not rolled back with the session): the server ends the session mid-statement.
    await stack.db.dataSource.query('CREATE SEQUENCE IF NOT EXISTS late_ack_cut');
    await onLateAcknowledgement(
      `IF nextval('late_ack_cut') = 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF;`,
    );
    const { executionId, opId } = await lateAcknowledgement('late-ack-cut');
    const log = await waitFor(
      () => events(stack, executionId),
      (l) => l.some((e) => e.operation_id === opId && e.type === 'operation.acknowledged_late'),
      15_000,
      150,
    );
    expectLegalHistory(log);
    expect(log.filter((e) => e.operation_id === opId && e.type === 'operation.acknowledged_late')).toHaveLength(1);
    const held = await getOperation(stack, opId);
    expect(held).toMatchObject({ status: 'MANUAL_REVIEW', acknowledged_at: expect.any(String) });
    expect(held.permitted_resolutions).toEqual(['VERIFIED']);
  }, 90_000);

  it('the write commits but its reply is lost: recorded once, not twice', async () => {
    // The statement outlasts the dispatcher's query timeout: given up by the dispatcher, committed by Postgres.
    await onLateAcknowledgement('PERFORM pg_sleep(2.5);');
    const { executionId, opId, dispatcher } = await lateAcknowledgement('late-ack-lost');
    await waitForLog(
      dispatcher,
      (l) =>
        l.msg === "the provider's answer was written by an earlier try whose reply was lost" && l.operationId === opId,
    );
    const log = await events(stack, executionId);
    expectLegalHistory(log);
    expect(log.filter((e) => e.operation_id === opId && e.type === 'operation.acknowledged_late')).toHaveLength(1);
    expect(await getOperation(stack, opId)).toMatchObject({
      status: 'MANUAL_REVIEW',
      acknowledged_at: expect.any(String),
    });
  }, 90_000);
});
