import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PrivateService, freePort, startPrivatePostgres } from '../../scripts/local-services';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { waitForMarkers } from './dispatcher-helpers';
import type { Execution } from '@verity/sdk';

/**
 * SIGTERM to a dispatcher whose send has been made while Postgres stopped answering: it cannot record the outcome.
 * It must still stop in bounded time with exit 0, leaving the operation SENT for the sweeper (never recorded
 * wrongly), and the work ends VERIFIED with one charge once Postgres answers again. Before DATABASE_QUERY_TIMEOUT_MS
 * the outcome's statement waited forever and the drain ended in the 25 s forced exit 1.
 */
function serverTree(root: number): number[] {
  const rows = execFileSync('ps', ['-e', '-o', 'pid=,ppid='])
    .toString()
    .trim()
    .split('\n')
    .map((line) => line.trim().split(/\s+/).map(Number));
  const tree = [root];
  for (let i = 0; i < tree.length; i += 1) for (const [pid, ppid] of rows) if (ppid === tree[i]) tree.push(pid);
  return tree;
}

function signalServer(pg: PrivateService, signal: NodeJS.Signals): void {
  if (!pg.pid) return;
  for (const pid of serverTree(pg.pid)) {
    try {
      process.kill(pid, signal);
    } catch {
      // Gone meanwhile.
    }
  }
}

describe('dispatcher SIGTERM while Postgres is stalled', () => {
  let stack: Stack;
  let pg: PrivateService | undefined;
  let dir = '';

  beforeAll(async () => {
    stack = await Stack.start({ label: 'dispdbstall', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => {
    if (pg) signalServer(pg, 'SIGCONT');
    await pg?.stop().catch(() => undefined);
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('exits 0 in bounded time, leaves the send for the sweeper, and the charge ends VERIFIED once', async () => {
    dir = mkdtempSync(join(tmpdir(), 'verity-disp-pgstall-'));
    pg = await startPrivatePostgres({ dir, port: await freePort() });
    const env = { DATABASE_URL: pg.url, QUEUE_PREFIX: `{${unique('dispstall')}}`, DATABASE_QUERY_TIMEOUT_MS: '1500' };
    const port = await freePort();
    await stack.startApp('api', {
      ...env,
      PORT: String(port),
      HOST: '127.0.0.1',
      RUN_MIGRATIONS: 'true',
      SEED_DEMO: 'true',
    });
    const url = `http://127.0.0.1:${port}`;
    const dispatcher = await stack.startApp('dispatcher', { ...env, TEST_PAUSE_AFTER_CALL_MS: '3000' });
    const reference = unique('stalled-outcome');
    const created = await http<Execution>(url, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(reference)]),
    });
    expect(created.status).toBe(201);
    await waitForMarkers(dispatcher, 'paused after call', 1);
    signalServer(pg, 'SIGSTOP');
    const stopping = Date.now();
    dispatcher.child.kill('SIGTERM');
    expect(await dispatcher.exited).toBe(0);
    expect(Date.now() - stopping).toBeLessThan(20_000);

    signalServer(pg, 'SIGCONT');
    await stack.startApp('dispatcher', env);
    await stack.startApp('reconciler', env);
    const done = await waitFor(
      async () => (await http<Execution>(url, 'GET', `/v1/executions/${created.body.id}`, { key: DEMO.agent })).body,
      (e) => e.status === 'completed',
      60_000,
      200,
    );
    expect(done.operations[0].status).toBe('VERIFIED');
    expect((await stack.effects()).charges[reference].count).toBe(1);
  }, 150_000);
});
