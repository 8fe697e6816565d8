import { createServer, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { posix } from 'node:path';
import { DEMO, Stack, waitFor } from '../support/stack';
import { Call, Execution, httpOp, recordingClient, submitOps } from './connectors-support';

/**
 * Red team: under `read_back_binding: "bound"` a read-back counts only when the URL *as it will be requested* names
 * this effect — `/orders/{{operation_id}}/..` is refused because the parser removes the dot segment before the target
 * sees it. `{{ref}}` counts as naming the effect, but it is substituted at run time, and encodeURIComponent leaves
 * "." alone: a reference of ".." (or ".") is a dot segment the URL parser then resolves, and an empty reference
 * leaves the collection's URL. The read-back `/items/{{ref}}` then asks `/` or `/items/` — a source that names no
 * effect at all — and a call that did nothing ends VERIFIED. The reference is the target's answer at the agent's own
 * `ref_field`, so an agent whose target echoes what it sent (or a provider that answers `"id": ""`) chooses it.
 */
describe('http read-back: a {{ref}} that is a dot segment or empty never verifies from another URL', () => {
  let stack: Stack;
  let call: Call;
  let server: Server;
  let base: string;
  const seen: { method: string; url: string; path: string }[] = [];

  beforeAll(async () => {
    server = createServer((req, res) => {
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString()));
      req.on('end', () => {
        // Routes as a proxy that decodes the path first would (nginx's normalisation, IIS's backslash): %2F and %5C
        // become slashes, dot segments are resolved and repeated slashes merged.
        const path = posix.normalize(decodeURIComponent(req.url ?? '').replace(/\\/g, '/'));
        seen.push({ method: req.method ?? '', url: req.url ?? '', path });
        const json = (status: number, value: unknown) => {
          res.writeHead(status, { 'content-type': 'application/json' });
          res.end(JSON.stringify(value));
        };
        // Creates nothing: answers with the name it was sent (an echo), as many APIs do for a client-chosen name.
        if (req.method === 'POST' && req.url === '/items') {
          return json(201, { id: (JSON.parse(body || '{}') as { name?: unknown }).name ?? null });
        }
        // A status page and a collection listing: both say "done", whatever any call did.
        if (req.method === 'GET' && (path === '/' || path === '/items/')) return json(200, { status: 'done' });
        return json(404, { error: { code: 'not_found' } });
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    base = `http://127.0.0.1:${port}`;
    stack = await Stack.start({ label: 'refdots' });
    ({ call } = recordingClient(stack));
    const put = await call('PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { allow_hosts: [{ host: '127.0.0.1', ports: [port], allow_private: true }], read_back_binding: 'bound' },
    });
    expect(put.status).toBe(200);
  });
  afterAll(async () => {
    await stack?.stop();
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve));
  });

  const item = (name: string) => ({
    method: 'POST',
    url: `${base}/items`,
    body: { name },
    ref_field: 'id',
    read_back: { url: `${base}/items/{{ref}}`, field: 'status', equals: 'done' },
  });

  it.each([
    ['..', '/'],
    ['.', '/items/'],
    ['', '/items/'],
    // encodeURIComponent sends these as ..%2F, ..%5C, %2F%2F: a server or proxy that decodes them first reads `/` or
    // `/items/` all the same.
    ['../', '/'],
    ['..\\', '/'],
    ['x/../..', '/'],
    ['//', '/items/'],
  ])('a reference %j is not read back at %s, and the operation is not VERIFIED', async (name, elsewhere) => {
    const created = await submitOps(call, [httpOp('item', item(name))]);
    const opId = created.operations[0].id;
    // Accepted under "bound": {{ref}} names the effect as the rule reads the template.
    const ended = await waitFor(
      async () => (await call<Execution>('GET', `/v1/executions/${created.id}`)).body.operations[0],
      (op) => ['VERIFIED', 'MANUAL_REVIEW', 'FAILED', 'CANCELLED'].includes(op.status),
      60_000,
      150,
    );
    expect({ op: opId, status: ended.status }).toEqual({ op: opId, status: 'MANUAL_REVIEW' });
    expect(seen.filter((s) => s.method === 'GET' && s.path === elsewhere)).toEqual([]);
  });
});
