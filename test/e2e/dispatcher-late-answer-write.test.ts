import IORedis from 'ioredis';
import { eventsChannel } from '@verity/queues';
import { TEST_REDIS_URL } from '../support/services';
import { Stack, waitFor } from '../support/stack';
import { sms, unique } from '../support/http';
import {
  events,
  expectLegalHistory,
  getOperation,
  logLines,
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
 * annotation's compare-and-set would let it through again). A late rejection (`rejected_at`, `operation.rejected_late`,
 * which keeps a person's VERIFIED from standing) is written through the same retry.
 */

/**
 * How each late answer is recorded: the provider's rule that makes it (none: a 2xx), its column, its event, and what a
 * person may then resolve the hold as.
 */
const LATE_ANSWERS = {
  acknowledgement: {
    providerRules: [],
    column: 'acknowledged_at',
    type: 'operation.acknowledged_late',
    data: {},
    permittedWhileHeld: ['VERIFIED'],
  },
  rejection: {
    providerRules: [{ method: 'POST', path: '/v1/messages', fault: 'reject' }],
    column: 'rejected_at',
    type: 'operation.rejected_late',
    data: { reason: 'CONNECTOR_REJECTED' },
    // FAILED too, once no call of the send can still land (a time bound): VERIFIED never.
    permittedWhileHeld: expect.not.arrayContaining(['VERIFIED']) as unknown,
  },
} as const;
type LateAnswer = (typeof LATE_ANSWERS)[keyof typeof LATE_ANSWERS];

describe('a late answer whose write fails', () => {
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
    await stack.setFaults({ rules: [] });
  });

  /** A trigger on the write of a late answer (its column set on an operation no longer SENT). */
  async function onLateAnswer(answer: LateAnswer, body: string) {
    await stack.db.dataSource.query(`
      CREATE OR REPLACE FUNCTION late_ack_fault() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN ${body} RETURN NEW; END $$`);
    await stack.db.dataSource.query(`
      CREATE TRIGGER late_ack_fault BEFORE UPDATE ON operations FOR EACH ROW
      WHEN (OLD.status <> 'SENT' AND OLD.${answer.column} IS NULL AND NEW.${answer.column} IS NOT NULL)
      EXECUTE FUNCTION late_ack_fault()`);
  }

  /**
   * An SMS whose dispatcher is frozen after its call until the sweeper has held it; then the provider's answer (its
   * 2xx, or its rejection) comes back. `onRetry` runs once the dispatcher has failed to write it and will try again.
   */
  async function lateAnswer(answer: LateAnswer, label: string, onRetry?: () => void) {
    await stack.setFaults({ rules: answer.providerRules });
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
    if (onRetry) {
      await waitForLog(
        dispatcher,
        (l) => l.msg === "the provider's answer could not be written; trying again" && l.operationId === opId,
      );
      onRetry();
    }
    return { executionId: created.id, opId, dispatcher };
  }

  it.each(Object.entries(LATE_ANSWERS))(
    'Postgres cuts the session writing a late %s: written again, on file before a person decides',
    async (name, answer) => {
      // Once (a sequence is not rolled back with the session): the server ends the session mid-statement.
      await stack.db.dataSource.query(`CREATE SEQUENCE IF NOT EXISTS late_${name}_cut`);
      await onLateAnswer(
        answer,
        `IF nextval('late_${name}_cut') = 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF;`,
      );
      const { executionId, opId, dispatcher } = await lateAnswer(answer, `late-${name}-cut`);
      const log = await waitFor(
        () => events(stack, executionId),
        (l) => l.some((e) => e.operation_id === opId && e.type === answer.type),
        15_000,
        150,
      );
      expectLegalHistory(log);
      const recorded = log.filter((e) => e.operation_id === opId && e.type === answer.type);
      expect(recorded).toHaveLength(1);
      expect(recorded[0].data).toMatchObject(answer.data);
      // Written by a later try, not the first: the cut was seen and the write made again.
      expect(
        logLines(dispatcher).some(
          (l) => l.msg === "the provider's answer could not be written; trying again" && l.operationId === opId,
        ),
      ).toBe(true);
      const held = await getOperation(stack, opId);
      expect(held).toMatchObject({ status: 'MANUAL_REVIEW', [answer.column]: expect.any(String) });
      // What the provider said decides what a person may still call it.
      expect(held.permitted_resolutions).toEqual(answer.permittedWhileHeld);
    },
    90_000,
  );

  it.each(Object.entries(LATE_ANSWERS))(
    'the write of a late %s commits but its reply is lost: recorded once, not twice, and announced to streams',
    async (name, answer) => {
      const subscriber = new IORedis(TEST_REDIS_URL);
      const announced: string[] = [];
      let announcedBeforeRetry = -1;
      subscriber.on('message', (_channel: string, ids: string) => announced.push(...ids.split(',')));
      try {
        await subscriber.subscribe(eventsChannel(stack.prefix));
        // The statement outlasts the dispatcher's query timeout: given up by the dispatcher, committed by Postgres.
        await onLateAnswer(answer, 'PERFORM pg_sleep(2.5);');
        const { executionId, opId, dispatcher } = await lateAnswer(answer, `late-${name}-lost`, () => {
          announcedBeforeRetry = announced.length;
        });
        await waitForLog(
          dispatcher,
          (l) =>
            l.msg === "the provider's answer was written by an earlier try whose reply was lost" &&
            l.operationId === opId,
        );
        const log = await events(stack, executionId);
        expectLegalHistory(log);
        expect(log.filter((e) => e.operation_id === opId && e.type === answer.type)).toHaveLength(1);
        expect(await getOperation(stack, opId)).toMatchObject({
          status: 'MANUAL_REVIEW',
          [answer.column]: expect.any(String),
        });
        // Its commit was heard by no caller, so no commit hook announced it: the retry that found it does, and a stream
        // waiting on the execution reads it at once rather than at its next poll.
        await waitFor(
          async () => announced.slice(announcedBeforeRetry),
          (ids) => ids.includes(executionId),
        );
      } finally {
        subscriber.disconnect();
      }
    },
    90_000,
  );
});
