import { Client } from 'pg';
import { DEMO, Stack, waitFor } from '../support/stack';
import { StallablePostgres } from '../support/stallable-postgres';
import { charge, http, submission, unique } from '../support/http';
import type { Execution } from '@verity/sdk';
import {
  events,
  expectDoneOnce,
  expectLegalHistory,
  statusPath,
  waitForLog,
  waitForMarkers,
} from './dispatcher-helpers';

/**
 * The provider answered a send and the write of its answer failed because Postgres went away (or the reply of a write
 * that committed was lost). The answer — the provider's reference, its rejection — exists nowhere else. Before, the write
 * was tried once: the job failed, the operation stayed SENT until the sweeper held it as UNKNOWN, and a read-back that
 * needs the provider's reference could not be made although the provider had given it. Now the write is tried again
 * while Postgres comes back within ANSWER_WRITE_RETRY_MS, and a retry that loses its compare-and-set to its own first
 * try (committed, reply lost) takes that try's write as its own: no error, no second event.
 */
describe('a provider answer whose write fails while Postgres is down', () => {
  let stack: Stack;
  let pg: StallablePostgres | undefined;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'answerdown', apis: 0, dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => {
    await pg?.stop();
    await stack?.stop();
  });

  it('is written once Postgres is back: ACKNOWLEDGED with the reference, never swept to UNKNOWN, one charge', async () => {
    pg = await StallablePostgres.start('answer-pgdown');
    const env = { DATABASE_URL: pg.url, QUEUE_PREFIX: `{${unique('answerdown')}}`, DATABASE_QUERY_TIMEOUT_MS: '1500' };
    stack.apiUrl = (await stack.startApiApp({ ...env, RUN_MIGRATIONS: 'true', SEED_DEMO: 'true' })).url;
    const dispatcher = await stack.startApp('dispatcher', { ...env, TEST_PAUSE_AFTER_CALL_MS: '1500' });
    // The sweeper runs all along: a send whose answer is being written again is not an orphan (its job holds its lock).
    await stack.startApp('reconciler', env);
    const reference = unique('answer-down');
    const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(reference)]),
    });
    expect(created.status).toBe(201);
    const [operationId] = await waitForMarkers(dispatcher, 'paused after call', 1);

    // Postgres goes away with the provider's answer in hand: sessions cut, new connections refused.
    await pg.service.stop();
    // The dispatcher has tried to write the answer while Postgres was down (and, before the fix, given up on it).
    await waitForLog(
      dispatcher,
      (line) =>
        line.operationId === operationId &&
        (line.msg === "the provider's answer could not be written; trying again" ||
          String(line.msg).startsWith('the provider answered but its answer could not be recorded')),
    );
    // Down for longer than the sweeper's orphan window (DISPATCH_LOCK_MS + SEND_GRACE_MS in tests: 3.5 s).
    await new Promise((resolve) => setTimeout(resolve, 4_000));
    await pg.service.restart();

    await expectDoneOnce(stack, stack.apiUrl, created.body.id, reference);
    const log = await events(stack, created.body.id);
    expectLegalHistory(log);
    expect(statusPath(log, operationId)).toEqual(['PREPARED', 'SENT', 'ACKNOWLEDGED', 'VERIFIED']);
    expect(log.filter((e) => e.type === 'operation.acknowledged_late')).toEqual([]);
    const db = new Client({ connectionString: pg.url });
    await db.connect();
    try {
      const { rows } = await db.query('SELECT provider_ref FROM operations WHERE id = $1', [operationId]);
      expect(rows[0].provider_ref).toEqual(expect.objectContaining({ id: expect.stringMatching(/^ch_/) }));
    } finally {
      await db.end();
    }
  }, 150_000);
});

describe('a provider answer whose write committed but whose reply was lost', () => {
  let stack: Stack;

  beforeAll(async () => {
    // No reconciler: nothing but the send's own job may carry the operation on (no sweeper re-enqueues a lost step).
    stack = await Stack.start({
      label: 'answerlost',
      reconcilers: 0,
      env: { DATABASE_QUERY_TIMEOUT_MS: '1500' },
    });
    // The write of the acknowledgement takes longer than the dispatcher waits for its reply: the dispatcher gives it up
    // (and drops its session) while Postgres goes on and commits it — a commit whose acknowledgement is lost.
    await stack.db.dataSource.query(`
      CREATE FUNCTION slow_acknowledgement() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_sleep(2.5); RETURN NEW; END $$`);
    await stack.db.dataSource.query(`
      CREATE TRIGGER slow_acknowledgement BEFORE UPDATE ON operations FOR EACH ROW
      WHEN (OLD.status = 'SENT' AND NEW.status = 'ACKNOWLEDGED') EXECUTE FUNCTION slow_acknowledgement()`);
  });
  afterAll(async () => stack?.stop());

  it('takes the first try as written: no error, one acknowledgement event, and the execution carries on', async () => {
    const reference = unique('answer-lost');
    const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(reference)]),
    });
    expect(created.status).toBe(201);
    // Completed by the dispatcher alone: its read at send verifies the charge and moves the execution on.
    await expectDoneOnce(stack, stack.apiUrl, created.body.id, reference);
    const log = await events(stack, created.body.id);
    expectLegalHistory(log);
    const operationId = created.body.operations[0].id;
    expect(statusPath(log, operationId)).toEqual(['PREPARED', 'SENT', 'ACKNOWLEDGED', 'VERIFIED']);
    expect(log.filter((e) => e.to_status === 'ACKNOWLEDGED')).toHaveLength(1);
    expect(log.filter((e) => e.type === 'operation.acknowledged_late')).toEqual([]);
    // The first try's reply was indeed lost, and the retry found that try's write.
    const [dispatcher] = stack.running('dispatcher');
    await waitFor(
      async () => dispatcher.output.join(''),
      (out) => out.includes('written by an earlier try whose reply was lost'),
    );
  }, 90_000);
});
