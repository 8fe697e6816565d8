import { DEMO, Stack } from '../support/stack';
import { StallablePostgres } from '../support/stallable-postgres';
import { charge, http, submission, unique } from '../support/http';
import { expectDoneOnce, waitForMarkers } from './dispatcher-helpers';
import type { Execution } from '@verity/sdk';

/**
 * SIGTERM to a dispatcher whose send has been made while Postgres stopped answering: it cannot record the outcome.
 * It must still stop in bounded time with exit 0, leaving the operation SENT for the sweeper (never recorded
 * wrongly), and the work ends VERIFIED with one charge once Postgres answers again. Before DATABASE_QUERY_TIMEOUT_MS
 * the outcome's statement waited forever and the drain ended in the 25 s forced exit 1.
 */
describe('dispatcher SIGTERM while Postgres is stalled', () => {
  let stack: Stack;
  let pg: StallablePostgres | undefined;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'dispdbstall', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => {
    await pg?.stop();
    await stack?.stop();
  });

  it('exits 0 (not the forced exit), leaves the send for the sweeper, and the charge ends VERIFIED once', async () => {
    pg = await StallablePostgres.start('disp-pgstall');
    const env = { DATABASE_URL: pg.url, QUEUE_PREFIX: `{${unique('dispstall')}}`, DATABASE_QUERY_TIMEOUT_MS: '1500' };
    const { url } = await stack.startApiApp({ ...env, RUN_MIGRATIONS: 'true', SEED_DEMO: 'true' });
    const dispatcher = await stack.startApp('dispatcher', { ...env, TEST_PAUSE_AFTER_CALL_MS: '3000' });
    const reference = unique('stalled-outcome');
    const created = await http<Execution>(url, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(reference)]),
    });
    expect(created.status).toBe(201);
    await waitForMarkers(dispatcher, 'paused after call', 1);
    pg.stall();
    dispatcher.child.kill('SIGTERM');
    // 0: the stop finished (held on the stalled Postgres, it is the forced exit 1 at the grace).
    expect(await dispatcher.exited).toBe(0);

    pg.resume();
    await stack.startApp('dispatcher', env);
    await stack.startApp('reconciler', env);
    await expectDoneOnce(stack, url, created.body.id, reference);
  }, 150_000);
});
