import { createServer } from 'node:http';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { listenLocally, type LocalServer } from '../support/local-server';
import type { Execution } from '@verity/sdk';

/**
 * The payment provider's read side answers 200 with a charge list whose entries are no charges (`null`, a number): the
 * dispatcher reads it as a charge's context before anything is sent. That read shows nothing — unread, as a body that
 * is no JSON is — and the execution goes on. Before: the connector threw a TypeError on `null.reference`, the job that
 * prepares the execution failed, and every retry and sweep read again and failed again: the execution stayed `created`
 * until its deadline, asking the provider several times a second.
 */
describe('a provider whose charge list holds entries that are no charges', () => {
  let stack: Stack;
  let proxy: LocalServer;
  let oddReads = 0;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'oddchargelist', dispatchers: 0 });
    // The dispatcher talks to the provider through this: its reads get the odd list, its sends go through unchanged.
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        if (req.method === 'GET' && (req.url ?? '').startsWith('/v1/charges')) {
          oddReads += 1;
          res.writeHead(200, { 'content-type': 'application/json' }).end('{"data":[null,7],"as_of_version":1}');
          return;
        }
        const headers = Object.fromEntries(
          Object.entries(req.headers).filter(
            (entry): entry is [string, string] => typeof entry[1] === 'string' && entry[0] !== 'host',
          ),
        );
        fetch(`${stack.sandboxUrl}${req.url}`, {
          method: req.method,
          headers,
          body: chunks.length > 0 ? Buffer.concat(chunks) : undefined,
        }).then(
          async (answer) => {
            res
              .writeHead(answer.status, Object.fromEntries(answer.headers))
              .end(Buffer.from(await answer.arrayBuffer()));
          },
          () => res.destroy(),
        );
      });
    });
    proxy = await listenLocally(server);
    await stack.startApp('dispatcher', { SANDBOX_URL: proxy.url });
  });
  afterAll(async () => {
    await stack?.stop();
    await proxy?.close();
  });

  it('reads it as unread: the charge is prepared and sent once, and the read is not repeated by failing jobs', async () => {
    const reference = unique('oddlist');
    const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(reference)]),
    });
    expect(created.status).toBe(201);
    const done = await waitFor(
      async () =>
        (await http<Execution>(stack.apiUrl, 'GET', `/v1/executions/${created.body.id}`, { key: DEMO.agent })).body,
      (execution) => ['completed', 'failed', 'cancelled', 'expired'].includes(execution.status),
      45_000,
      200,
    );
    expect(done.operations[0].status).toBe('VERIFIED');
    expect((await stack.effects()).charges[reference].count).toBe(1);
    // The context read when it was prepared and the read-back right after the send (the reconciler reads the provider
    // directly): no job failing and reading again.
    expect(oddReads).toBeLessThanOrEqual(2);
  }, 90_000);
});
