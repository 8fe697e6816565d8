import { createServer, type Server } from 'node:http';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { listenLocally, type LocalServer } from '../support/local-server';
import type { Execution } from '@verity/sdk';

/**
 * The payment provider's read side answers 200 with a body that cannot be read (cut short, not JSON, no `data`):
 * that read shows nothing, so it must not count as "the charge is absent". Before: the body was taken as `{}`, the
 * charge list as empty, and an UNKNOWN charge that did happen was reconciled to FAILED (PROVEN_ABSENT). Now such a
 * read is the source being unreadable: the charge stays unresolved until the budget sends it to a human.
 */
const BODIES = ['{"data": [{"id": "ch_', '<html>502 Bad Gateway</html>', '{"as_of_version": 99}'];

describe('a 200 read-back whose body cannot be read', () => {
  let stack: Stack;
  let proxy: LocalServer;
  let served = 0;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'unreadableread', reconcilers: 0 });
    // The reconciler reads through this: every read answered 200 with an unreadable body, in turn.
    const server: Server = createServer((req, res) => {
      const body = BODIES[served % BODIES.length];
      served += 1;
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json' }).end(body);
    });
    proxy = await listenLocally(server);
    await stack.startApp('reconciler', { SANDBOX_URL: proxy.url });
  });
  afterAll(async () => {
    await proxy?.close();
    await stack?.stop();
  });

  it('an UNKNOWN charge that happened is never FAILED on such reads: it goes to MANUAL_REVIEW', async () => {
    const reference = unique('unreadable');
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', count: 1 }],
    });
    const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(reference)]),
    });
    expect(created.status).toBe(201);
    const settled = await waitFor(
      async () =>
        (await http<Execution>(stack.apiUrl, 'GET', `/v1/executions/${created.body.id}`, { key: DEMO.agent })).body
          .operations[0],
      (op) => op.status === 'FAILED' || op.status === 'MANUAL_REVIEW' || op.status === 'VERIFIED',
      60_000,
      200,
    );
    expect(served).toBeGreaterThan(0);
    expect(settled.status).toBe('MANUAL_REVIEW');
    // It did happen.
    expect((await stack.effects()).charges[reference].count).toBe(1);
  }, 90_000);
});
