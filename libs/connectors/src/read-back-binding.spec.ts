import { createServer, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readBackBindingProblems, type ConnectorEnvironment, type ConnectorOperation } from './connector';
import { HttpConnector, httpReadBackBindingProblems } from './http.connector';
import { ConnectorSettingsInputSchema } from './tenant-settings';

/**
 * Red-team finding H2: an http operation declares its own read-back, so it could point it at any allowlisted URL whose
 * field happens to equal `equals` and end VERIFIED for a call that did nothing. Under the tenant's
 * `read_back_binding: "bound"` a read-back counts only if it asks the request's own origin and names this effect.
 */
describe('read_back_binding: the binding rule (httpReadBackBindingProblems)', () => {
  const request = 'https://crm.example.com/v1/tickets';
  const conditions = (readBack: { url: string; headers?: Record<string, string> }, url = request) =>
    httpReadBackBindingProblems({ url, read_back: readBack }).map((p) => p.condition);

  it('a read-back on the same origin naming the effect in its URL counts, for each of the three variables', () => {
    for (const variable of ['{{ref}}', '{{operation_id}}', '{{idempotency_key}}', '{{ ref }}']) {
      expect(conditions({ url: `https://crm.example.com/v1/tickets/${variable}` })).toEqual([]);
      expect(conditions({ url: `https://crm.example.com/v1/tickets?external_id=${variable}` })).toEqual([]);
    }
  });

  it('a read-back naming the effect in a header value counts, for each of the three variables', () => {
    for (const variable of ['{{ref}}', '{{operation_id}}', '{{idempotency_key}}']) {
      expect(conditions({ url: 'https://crm.example.com/v1/lookup', headers: { 'x-external-id': variable } })).toEqual(
        [],
      );
      expect(
        conditions({ url: 'https://crm.example.com/v1/lookup', headers: { 'x-query': `id eq '${variable}'` } }),
      ).toEqual([]);
    }
  });

  it('a read-back naming nothing of this effect does not count (a status page that always says ok)', () => {
    expect(conditions({ url: 'https://crm.example.com/v1/status' })).toEqual(['names_effect']);
    // A secret in a header is the tenant's, not this effect's.
    expect(
      conditions({ url: 'https://crm.example.com/v1/status', headers: { authorization: 'Bearer {{secret:tok}}' } }),
    ).toEqual(['names_effect']);
    // A fragment never reaches the target: a variable there names nothing.
    expect(conditions({ url: 'https://crm.example.com/v1/status#{{operation_id}}' })).toEqual(['names_effect']);
  });

  it('is judged on the URL as it is sent: a variable in a dot segment the client removes does not count', () => {
    // Red team round 2: `/x/{{operation_id}}/../../status` passed, and the target saw only GET /status.
    for (const url of [
      'https://crm.example.com/v1/x/{{operation_id}}/../../status',
      'https://crm.example.com/v1/x/{{operation_id}}/%2e%2e/%2E%2E/status',
      'https://crm.example.com/v1/status#{{operation_id}}',
    ]) {
      expect([url, conditions({ url })]).toEqual([url, ['names_effect']]);
    }
    expect(conditions({ url: 'https://crm.example.com/v1/tickets/{{operation_id}}/../{{operation_id}}' })).toEqual([]);
  });

  it('binds a context read that can verify (it has equals) by the same rule, and leaves one that only reports alone', () => {
    // Red team round 2: a context `{ url: …/status, field: status, equals: ok }` ended a call that was never sent
    // VERIFIED no_change_required under "bound".
    const problems = (context: Record<string, unknown>) =>
      httpReadBackBindingProblems({ url: request, context: context as never }).map((p) => [p.field, p.condition]);
    expect(problems({ url: 'https://crm.example.com/v1/status', field: 'status', equals: 'ok' })).toEqual([
      ['params.context', 'names_effect'],
    ]);
    expect(
      problems({ url: 'https://other.example.com/v1/t?id={{operation_id}}', field: 'status', equals: 'ok' }),
    ).toEqual([['params.context.url', 'origin']]);
    expect(
      problems({ url: 'https://crm.example.com/v1/t?id={{operation_id}}', field: 'status', equals: 'ok' }),
    ).toEqual([]);
    expect(problems({ url: 'https://crm.example.com/v1/status', field: 'status' })).toEqual([]);
  });

  it('a variable only in the equals value does not count: it is compared, never sent', () => {
    const problems = httpReadBackBindingProblems({
      url: request,
      read_back: { url: 'https://crm.example.com/v1/status', field: 'id', equals: '{{operation_id}}' } as never,
    });
    expect(problems.map((p) => p.condition)).toEqual(['names_effect']);
  });

  it('another port, scheme or host does not count, even naming the effect', () => {
    const id = '/v1/tickets/{{operation_id}}';
    expect(conditions({ url: `https://crm.example.com:8443${id}` })).toEqual(['origin']);
    expect(conditions({ url: `http://crm.example.com${id}` })).toEqual(['origin']);
    expect(conditions({ url: `https://status.example.com${id}` })).toEqual(['origin']);
    expect(conditions({ url: `https://example.com${id}` })).toEqual(['origin']);
    // Both conditions broken: both reported.
    expect(conditions({ url: 'https://status.example.com/ok' })).toEqual(['origin', 'names_effect']);
  });

  it('the origin is compared as URLs have it: default port and host case do not make another origin', () => {
    expect(conditions({ url: 'https://CRM.example.com:443/v1/tickets/{{ref}}' })).toEqual([]);
    expect(conditions({ url: 'http://10.0.0.5:80/x/{{ref}}' }, 'http://10.0.0.5/y')).toEqual([]);
    expect(conditions({ url: 'http://[::1]:8080/x/{{ref}}' }, 'http://[::1]:8080/y')).toEqual([]);
    expect(conditions({ url: 'http://[::1]:8081/x/{{ref}}' }, 'http://[::1]:8080/y')).toEqual(['origin']);
  });

  it('an operation without read_back has nothing to bind', () => {
    expect(httpReadBackBindingProblems({ url: request })).toEqual([]);
  });

  it('names the field and the condition each problem is about', () => {
    const problems = httpReadBackBindingProblems({ url: request, read_back: { url: 'https://other.example/ok' } });
    expect(problems).toEqual([
      {
        of: 'read_back',
        field: 'params.read_back.url',
        condition: 'origin',
        message: expect.stringContaining('own origin'),
      },
      {
        of: 'read_back',
        field: 'params.read_back',
        condition: 'names_effect',
        message: expect.stringContaining('{{operation_id}}'),
      },
    ]);
  });

  it('is what the connector declares, and what the registry helper answers (failing closed on params it cannot read)', () => {
    const connector = new HttpConnector();
    expect(connector.settings.readBackBinding).toBe(true);
    const params = { method: 'POST', url: request, read_back: { url: `${request}/status`, field: 'a', equals: 1 } };
    expect(readBackBindingProblems(connector, 'request', params).map((p) => p.condition)).toEqual(['names_effect']);
    expect(readBackBindingProblems(connector, 'no-such-action', params)).toEqual([]);
    // Unreadable params: neither read may verify (the read-back, nor a context read with equals).
    expect(readBackBindingProblems(connector, 'request', { read_back: { url: 1 } }).map((p) => p.of)).toEqual([
      'read_back',
      'context',
    ]);
  });
});

describe('read_back_binding: the admin setting (ConnectorSettingsInputSchema)', () => {
  it('takes "declared" or "bound", and nothing else', () => {
    expect(ConnectorSettingsInputSchema.safeParse({ read_back_binding: 'bound' }).success).toBe(true);
    expect(ConnectorSettingsInputSchema.safeParse({ read_back_binding: 'declared' }).success).toBe(true);
    expect(ConnectorSettingsInputSchema.safeParse({ allow_hosts: [] }).success).toBe(true);
    for (const value of ['strict', 'BOUND', '', null, true]) {
      const parsed = ConnectorSettingsInputSchema.safeParse({ read_back_binding: value });
      expect(parsed.success).toBe(false);
      expect(parsed.error?.issues[0].path).toEqual(['read_back_binding']);
    }
  });
});

describe('read_back_binding: an operation accepted before the switch is not read under "bound"', () => {
  let server: Server;
  let base: string;
  let port: number;
  const hits: string[] = [];
  beforeAll(async () => {
    // A target whose status page always says ok: what an unbound read-back would find whatever the call did.
    server = createServer((req, res) => {
      hits.push(req.url ?? '');
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ status: 'ok' }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
    base = `http://127.0.0.1:${port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  const connector = new HttpConnector();
  const env = (readBackBinding?: 'declared' | 'bound'): ConnectorEnvironment => ({
    sandboxUrl: 'unused',
    timeoutMs: 800,
    tenant: { allowHosts: [{ host: '127.0.0.1', ports: [port], allow_private: true }], readBackBinding },
  });
  const op = (readBackUrl: string): ConnectorOperation => ({
    id: 'op_bind1',
    tenantId: 'demo',
    action: 'request',
    params: { method: 'POST', url: `${base}/orders`, read_back: { url: readBackUrl, field: 'status', equals: 'ok' } },
    expectedState: null,
    providerRef: null,
  });

  it('declared (or unset): the unbound read is made and found, as before the setting existed', async () => {
    expect(await connector.readBack(op(`${base}/status`), env())).toMatchObject({ kind: 'found' });
    expect(await connector.readBack(op(`${base}/status`), env('declared'))).toMatchObject({ kind: 'found' });
  });

  it('bound: the unbound read is not made; it is inconclusive (never found), and the evidence says why', async () => {
    const before = hits.length;
    const read = await connector.readBack(op(`${base}/status`), env('bound'));
    expect(read).toEqual({
      kind: 'unreachable',
      notMade: true,
      evidence: {
        source: `${base}/status`,
        read_at: expect.any(String),
        error: expect.stringMatching(/^not read: read_back must name this effect/),
        read_back_binding: 'bound',
        unbound: ['names_effect'],
      },
    });
    expect(hits.length).toBe(before);
  });

  it('bound: a context read that could verify without naming the effect is not made either', async () => {
    const withContext = (url: string): ConnectorOperation => ({
      ...op(`${base}/orders/{{operation_id}}`),
      params: { method: 'POST', url: `${base}/orders`, context: { url, field: 'status', equals: 'ok' } },
    });
    const before = hits.length;
    expect(await connector.readContext(withContext(`${base}/status`), env('bound'))).toMatchObject({
      kind: 'unreachable',
      evidence: { read_back_binding: 'bound', unbound: ['names_effect'] },
    });
    expect(hits.length).toBe(before);
    // Declared: read, and the state it shows can say no change is required, as before.
    expect(await connector.readContext(withContext(`${base}/status`), env('declared'))).toMatchObject({
      kind: 'state',
      requestedStatePresent: true,
    });
  });

  it('bound: a bound read is made and found', async () => {
    expect(await connector.readBack(op(`${base}/orders/{{operation_id}}`), env('bound'))).toMatchObject({
      kind: 'found',
    });
    expect(hits[hits.length - 1]).toBe('/orders/op_bind1');
  });
});
