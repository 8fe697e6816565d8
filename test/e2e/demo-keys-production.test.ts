import { request } from 'node:http';
import { createApiKey } from '@verity/persistence/api-keys';
import { DEMO, Stack, freePort } from '../support/stack';
import { http, rawExchange } from '../support/http';

/**
 * Red team (round 9, keys): the published demo keys (README, docs/api.md) are seeded only by the local demo, and
 * SEED_DEMO=true stops a production app at boot. But seeding is not undone: a database the local demo once ran
 * against (`npm start` with DATABASE_URL set to it, to try the quick start) keeps `demo-admin-key`,
 * `demo-operator-key`, … and a production API that later runs on it accepted them — keys anyone can read in the
 * docs, an operator key (every tenant's jobs in Bull Board, /metrics) among them. In production a published demo key
 * authenticates as nobody, whatever the database holds.
 */
describe('published demo keys in production', () => {
  let stack: Stack;
  let production: string;

  beforeAll(async () => {
    // The test stack seeds the demo keys, as `npm start` would have on this database.
    stack = await Stack.start({ label: 'demoprod', dispatchers: 0, reconcilers: 0 });
    const port = await freePort();
    await stack.startApp('api', {
      PORT: String(port),
      HOST: '127.0.0.1',
      NODE_ENV: 'production',
      SEED_DEMO: 'false',
      TENANT_PRIVATE_EGRESS: 'false',
    });
    production = `http://127.0.0.1:${port}`;
  });
  afterAll(async () => stack?.stop());

  it('a development API accepts them (the local demo)', async () => {
    expect((await http(stack.apiUrl, 'GET', '/v1/executions', { key: DEMO.agent })).status).toBe(200);
  });

  it('a production API on the same database answers 401 to every one, the operator key included', async () => {
    for (const key of [DEMO.agent, DEMO.reviewer, DEMO.admin, 'demo-other-agent-key']) {
      const answer = await http<{ type: string }>(production, 'GET', '/v1/executions', { key });
      expect({ key, status: answer.status }).toEqual({ key, status: 401 });
    }
    const board = await http(production, 'GET', '/admin/queues/api/queues', { key: 'demo-operator-key' });
    expect(board.status).toBe(401);
    const metrics = await http(production, 'GET', '/metrics', { key: 'demo-operator-key' });
    expect(metrics.status).toBe(401);
  });
});

/**
 * Red team (integrations): DNS rebinding with the published demo keys. A web page of http://rebound.example:<port>
 * whose name is then re-pointed at 127.0.0.1 calls the local demo as its own origin: the browser sends
 * `Host: rebound.example:<port>`, no CORS applies, and it may send any Authorization it likes — the demo keys are in
 * the README. /mcp refused it by its Origin; /v1, Bull Board and /metrics answered it (a page could list and submit
 * executions, change a tenant's settings, read every tenant's jobs). A published demo key now works only on a request
 * addressed to the API by an IP address or a loopback name, which no page of another site has as its host.
 */
describe('published demo keys and DNS rebinding (the local demo)', () => {
  let stack: Stack;
  let port: string;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'demorebind', dispatchers: 0, reconcilers: 0 });
    port = new URL(stack.apiUrl).port;
  });
  afterAll(async () => stack?.stop());

  /**
   * One request to the test API with the Host header a browser would send (fetch always sends the URL's own host):
   * `host` as given, the key as a bearer token unless `authorization` is given.
   */
  function addressedTo(
    host: string,
    method: string,
    path: string,
    options: { key?: string; body?: string; headers?: Record<string, string> } = {},
  ): Promise<{ status: number; type: string | undefined; body: Record<string, unknown> | undefined }> {
    return new Promise((resolve, reject) => {
      const req = request(
        `${stack.apiUrl}${path}`,
        {
          method,
          headers: {
            ...(options.key ? { authorization: `Bearer ${options.key}` } : {}),
            ...(options.body ? { 'content-type': 'application/json' } : {}),
            ...options.headers,
            host,
          },
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => (text += chunk));
          res.on('end', () => {
            let body: Record<string, unknown> | undefined;
            try {
              body = JSON.parse(text) as Record<string, unknown>;
            } catch {
              body = undefined;
            }
            resolve({ status: res.statusCode ?? 0, type: res.headers['content-type'], body });
          });
        },
      );
      req.on('error', reject);
      req.end(options.body);
    });
  }

  async function executionCount(): Promise<number> {
    const [row] = (await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM executions`)) as { n: number }[];
    return row.n;
  }

  function submission(ref: string) {
    return {
      agent_id: 'rebinding-page',
      intent: 'a page of another site acting with a published key',
      operations: [
        {
          key: 'notify',
          connector: 'sandbox.sms',
          action: 'send',
          params: { to: '+15550100', body: 'hi', client_ref: ref },
        },
      ],
    };
  }

  it('answers a request addressed to another host name 403 with any demo key, on every surface, and writes nothing', async () => {
    const before = await executionCount();
    const basic = `Basic ${Buffer.from(`operator:${DEMO.operator}`).toString('base64')}`;
    const host = `rebound.example:${port}`;
    const refused = [
      await addressedTo(host, 'GET', '/v1/executions', { key: DEMO.agent }),
      await addressedTo(host, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: JSON.stringify(submission('rebinding-1')),
        headers: { 'idempotency-key': 'rebinding-1' },
      }),
      await addressedTo(host, 'GET', '/v1/admin/connector-settings', { key: DEMO.admin }),
      await addressedTo(host, 'GET', '/v1/review/summary', { key: DEMO.reviewer }),
      await addressedTo(host, 'GET', '/admin/queues/api/queues', { key: DEMO.operator }),
      await addressedTo(host, 'GET', '/admin/queues/api/queues', { headers: { authorization: basic } }),
      await addressedTo(host, 'GET', '/metrics', { key: DEMO.operator }),
      // A client that is no browser sends no Origin: /mcp's Origin check lets it by, the key's check does not.
      await addressedTo(host, 'POST', '/mcp', {
        key: DEMO.agent,
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
        headers: { accept: 'application/json, text/event-stream' },
      }),
    ];
    for (const answer of refused) {
      expect({ status: answer.status, type: answer.type }).toEqual({
        status: 403,
        type: expect.stringMatching(/^application\/problem\+json/),
      });
      expect(answer.body).toMatchObject({
        type: 'https://verity.dev/problems/forbidden',
        detail: expect.stringContaining('rebound.example'),
      });
    }
    expect(await executionCount()).toBe(before);
  });

  it('still takes them addressed to localhost, a name under .localhost, or an IP address', async () => {
    for (const host of [
      `localhost:${port}`,
      `LocalHost:${port}`,
      `app.localhost:${port}`,
      `127.0.0.1:${port}`,
      '[::1]',
    ]) {
      const answer = await addressedTo(host, 'GET', '/v1/executions', { key: DEMO.agent });
      expect({ host, status: answer.status }).toEqual({ host, status: 200 });
    }
    const board = await addressedTo(`localhost:${port}`, 'GET', '/admin/queues/api/queues', { key: DEMO.operator });
    expect(board.status).toBe(200);
  });

  /**
   * Red team (hostile pass 3): with an absolute-form target (`GET http://host/path`) the host is the target's, and Host
   * is ignored (RFC 9112, section 3.2.2). The key's check read Host: `GET http://rebound.example/…` with
   * `Host: 127.0.0.1` took a demo key, and the reverse was refused. A target whose host is not Host's is now refused
   * (400) before any check reads either; one that agrees is served as its origin-form twin.
   */
  it('refuses an absolute-form target naming another host than Host (400), whichever of the two is local', async () => {
    const before = await executionCount();
    const exchange = (target: string, host: string) =>
      rawExchange(
        stack.apiUrl,
        `GET ${target} HTTP/1.1\r\nhost: ${host}\r\nauthorization: Bearer ${DEMO.agent}\r\nconnection: close\r\n\r\n`,
        { halfClose: false },
      );
    for (const [target, host] of [
      [`http://rebound.example:${port}/v1/executions`, `127.0.0.1:${port}`],
      [`http://127.0.0.1:${port}/v1/executions`, `rebound.example:${port}`],
      [`http://127.0.0.1:${port}/v1/executions`, `127.0.0.1:1`],
      [`ftp://127.0.0.1:${port}/v1/executions`, `127.0.0.1:${port}`],
    ]) {
      const answer = await exchange(target, host);
      expect({ target, host, status: answer.status, type: answer.headers['content-type'] }).toEqual({
        target,
        host,
        status: 400,
        type: 'application/problem+json; charset=utf-8',
      });
      expect(JSON.parse(answer.body)).toMatchObject({ type: 'https://verity.dev/problems/bad-request' });
    }
    // The same host in both (case and the default port aside): served as `GET /v1/executions` with that Host.
    const same = await exchange(`http://LOCALHOST:${port}/v1/executions`, `localhost:${port}`);
    expect(same.status).toBe(200);
    const defaultPort = await exchange('http://127.0.0.1:80/v1/executions', '127.0.0.1');
    expect(defaultPort.status).toBe(200);
    const named = await exchange(`http://rebound.example:${port}/v1/executions`, `rebound.example:${port}`);
    expect(named.status).toBe(403);
    expect(await executionCount()).toBe(before);
  });

  it('takes a key that is not published under any host name (a deployment behind its own domain)', async () => {
    const { key } = await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo', role: 'agent', label: 'own' });
    const answer = await addressedTo(`rebound.example:${port}`, 'GET', '/v1/executions', { key });
    expect(answer.status).toBe(200);
  });
});
