import { skewedClock } from '../support/skewed-clock';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, sms, unique } from '../support/http';
import { resetSandbox, settle, submit, waitForOp } from './dispatcher-helpers';

/** How far behind the database's clock every app's host clock runs. */
const BEHIND_MS = 10 * 60_000;
/** How far a stamp may be from the database's clock around it: the offset is measured over one round trip. */
const SLACK_MS = 1_000;

/**
 * The times a process writes into a row or an event are shown beside the ones the database stamps (`created_at`,
 * the events'). Taken from the host's clock, a host 10 minutes behind dated an outcome's evaluation, an execution's
 * end (rejected, expired, cancelled), a policy change and an escalation 10 minutes before what they follow.
 */
describe('times written by hosts whose clocks are behind the database’s: on the database’s clock', () => {
  let stack: Stack;
  let clock: ReturnType<typeof skewedClock> | undefined;
  /** Submitted before any dispatcher ran, its row then changed to what intake would refuse. */
  let invalidId: string;
  let invalidSubmittedAt: number;
  beforeAll(async () => {
    clock = skewedClock();
    stack = await Stack.start({ label: 'stampclock', apis: 0, dispatchers: 0, reconcilers: 0 });
    stack.apiUrl = await stack.startApi(clock.env(-BEHIND_MS));
    // A row written by an older API version or by hand: the dispatcher re-checks it and fails the execution.
    invalidSubmittedAt = await databaseNow();
    invalidId = (await submit(stack, [charge(unique('invalid-clock'))])).id;
    await stack.db.dataSource.query(`UPDATE operations SET params = '{}'::jsonb WHERE execution_id = $1`, [invalidId]);
    await stack.startApp('dispatcher', clock.env(-BEHIND_MS));
    await stack.startApp('reconciler', clock.env(-BEHIND_MS));
  });
  afterAll(async () => {
    await stack?.stop();
    clock?.remove();
  });
  afterEach(async () => resetSandbox(stack));

  const databaseNow = () => stack.databaseNow();

  /** `stamp` lies between `from` and the database's now, both by the database's clock. */
  async function expectStampedSince(stamp: string, from: number): Promise<void> {
    const at = Date.parse(stamp);
    expect(at).toBeGreaterThanOrEqual(from - SLACK_MS);
    expect(at).toBeLessThanOrEqual((await databaseNow()) + SLACK_MS);
  }

  /** The execution's failure, once it has one. */
  async function failureOf(executionId: string): Promise<{ code: string; at: string }> {
    const [row] = await waitFor(
      async () =>
        (await stack.db.dataSource.query(`SELECT failure FROM executions WHERE id = $1`, [executionId])) as {
          failure: { code: string; at: string } | null;
        }[],
      (found) => found[0]?.failure !== null,
      45_000,
      50,
    );
    return row.failure!;
  }

  /** A charge held before it is sent (the source disagrees already), with a message that waits for it. */
  function heldSubmission(extra: Record<string, unknown>) {
    return submit(
      stack,
      [
        charge(unique('held-clock'), { expected_state: { charged: true } }),
        sms(unique('held-clock-sms'), { depends_on: ['charge'] }),
      ],
      extra,
    );
  }

  it('dates a rejected row’s failure by the database’s clock', async () => {
    const failure = await failureOf(invalidId);
    expect(failure.code).toBe('invalid_request');
    await expectStampedSince(failure.at, invalidSubmittedAt);
  });

  it('dates an outcome’s evaluation by the database’s clock', async () => {
    const from = await databaseNow();
    const created = await submit(stack, [charge(unique('outcome-clock'))], {
      criteria: [{ key: 'paid', operation: 'charge', expect_status: 'VERIFIED' }],
    });
    await settle(stack, created.id);
    const [{ outcome }] = (await stack.db.dataSource.query(`SELECT outcome FROM executions WHERE id = $1`, [
      created.id,
    ])) as { outcome: { evaluated_at: string } }[];
    await expectStampedSince(outcome.evaluated_at, from);
  });

  it('dates an expiry by the database’s clock', async () => {
    const created = await heldSubmission({ deadline_seconds: 3 });
    const failure = await failureOf(created.id);
    expect(failure.code).toBe('deadline_exceeded');
    const [{ deadline_at: deadline }] = (await stack.db.dataSource.query(
      `SELECT deadline_at FROM executions WHERE id = $1`,
      [created.id],
    )) as { deadline_at: Date }[];
    await expectStampedSince(failure.at, deadline.getTime());
  });

  it('dates a cancel by the database’s clock', async () => {
    const created = await heldSubmission({ deadline_seconds: 300 });
    await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    const from = await databaseNow();
    const cancelled = await http(stack.apiUrl, 'POST', `/v1/executions/${created.id}/cancel`, {
      key: DEMO.agent,
      body: { reason: 'not wanted' },
    });
    expect(cancelled.status).toBe(200);
    const failure = await failureOf(created.id);
    expect(failure.code).toBe('cancelled_by_caller');
    await expectStampedSince(failure.at, from);
  });

  it('dates a policy change by the database’s clock', async () => {
    const from = await databaseNow();
    const put = await http(stack.apiUrl, 'PUT', '/v1/admin/policy', {
      key: DEMO.admin,
      body: { obligation_owner: unique('owner') },
    });
    expect(put.status).toBe(200);
    const read = await http<{ updated_at: string }>(stack.apiUrl, 'GET', '/v1/admin/policy', { key: DEMO.admin });
    await expectStampedSince(read.body.updated_at, from);
  });

  it('dates an escalation by the database’s clock', async () => {
    const created = await heldSubmission({ deadline_seconds: 300 });
    const held = await waitForOp(stack, created.id, 'charge', (o) => o.status === 'MANUAL_REVIEW');
    // Overdue by the database's clock from now on: the next sweep escalates it.
    const from = await databaseNow();
    await stack.db.dataSource.query(
      `UPDATE operations SET obligation = jsonb_set(obligation, '{due_at}', to_jsonb($2::text)) WHERE id = $1`,
      [held.id, new Date(from - 1_000).toISOString()],
    );
    const [row] = await waitFor(
      async () =>
        (await stack.db.dataSource.query(`SELECT obligation FROM operations WHERE id = $1`, [held.id])) as {
          obligation: { escalated_at?: string | null };
        }[],
      (found) => typeof found[0]?.obligation.escalated_at === 'string',
      45_000,
      100,
    );
    await expectStampedSince(row.obligation.escalated_at!, from);
  });
});
