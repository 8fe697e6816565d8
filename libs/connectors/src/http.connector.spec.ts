import { createServer, IncomingMessage, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { OperationStatus, TerminalReason } from '@verity/status-model';
import type { ConnectorEnvironment, ConnectorOperation } from './connector';
import { operationCapabilities } from './connector';
import { HttpConnector } from './http.connector';
import { endlessAnswerServer } from '../../../test/support/endless-answer';
import { serveDuringDescribe } from '../../../test/support/local-server';

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

/** A real HTTP server on loopback standing in for an arbitrary third-party API. */
async function target(): Promise<{ server: Server; base: string; seen: Seen[]; port: number }> {
  const seen: Seen[] = [];
  const records = new Map<string, unknown>();
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
      const json = (status: number, value: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(value));
      };
      const path = req.url ?? '';
      if (req.method === 'POST' && path === '/orders') {
        const parsed = JSON.parse(body) as { id: string };
        records.set(parsed.id, { data: { status: 'created', id: parsed.id } });
        return json(201, { id: `srv-${parsed.id}`, secret_echo: req.headers.authorization });
      }
      if (req.method === 'POST' && path === '/orders-unrecorded') {
        // Acknowledged as POST /orders is, and nothing recorded: a call that did nothing.
        const parsed = JSON.parse(body) as { id: string };
        return json(201, { id: `srv-${parsed.id}` });
      }
      if (path.startsWith('/orders/')) {
        const record = records.get(decodeURIComponent(path.slice('/orders/'.length)));
        return record ? json(200, record) : json(404, { error: { code: 'not_found' } });
      }
      if (path.startsWith('/lookup?')) {
        // The record of a reference given in the query (`srv-<id>`, as POST /orders answers it).
        const ref = new URLSearchParams(path.slice('/lookup?'.length)).get('ref') ?? '';
        const record = records.get(ref.replace(/^srv-/, ''));
        return record ? json(200, record) : json(404, { error: { code: 'not_found' } });
      }
      if (req.method === 'POST' && (path === '/orders-twice' || path === '/orders-rounded')) {
        // JSON that reads two ways: JSON.parse keeps the last of two ids, and rounds an id beyond 2^53.
        res.writeHead(201, { 'content-type': 'application/json' });
        return res.end(path === '/orders-twice' ? '{"id":"srv-a","id":"srv-b"}' : '{"id":12345678901234567891}');
      }
      if (req.method === 'POST' && path === '/orders-listed') {
        // The second item names its id twice: JSON.parse keeps srv-b.
        res.writeHead(201, { 'content-type': 'application/json' });
        return res.end('{"items":[{"id":"srv-x"},{"id":"srv-a","id":"srv-b"}]}');
      }
      if (path === '/orders-elsewhere' || path.startsWith('/read-elsewhere?')) {
        // Readable where it is read: the id (or status) once and exact, a 64-bit sequence number and a member named twice
        // elsewhere, which JSON.parse rounds or keeps the last of.
        res.writeHead(req.method === 'POST' ? 201 : 200, { 'content-type': 'application/json' });
        return res.end('{"id":"srv-a","data":{"status":"created"},"seq":12345678901234567891,"x":1,"x":2}');
      }
      if (path === '/reject') return json(422, { error: { code: 'invalid_order' } });
      if (path === '/conflict') return json(409, { error: { code: 'duplicate' } });
      if (path === '/boom') return json(500, { error: 'boom' });
      if (path === '/slow') return setTimeout(() => json(201, {}), 1500);
      if (path === '/redirect') {
        res.writeHead(302, { location: '/orders' });
        return res.end();
      }
      if (path === '/big') return json(200, { data: { status: 'x'.repeat(100_000) } });
      if (path === '/no-field') return json(200, { other: 1 });
      // A search answered with no match (or, lagging, not yet): a list with no entry, or nothing where the record goes.
      if (path === '/no-match') return json(200, { data: [], total: 0 });
      if (path === '/no-match-null') return json(200, { data: null });
      if (path === '/one-match') return json(200, { data: [{ id: 'rb-9' }] });
      if (path.startsWith('/as-json?')) {
        // The JSON text given, as the answer (a shape a case needs, written as the target would).
        res.writeHead(200, { 'content-type': 'application/json' });
        return res.end(new URLSearchParams(path.slice('/as-json?'.length)).get('body') ?? '');
      }
      if (path === '/forged-marker') {
        // A value that looks like a redaction marker and is none: it opens near the cut and closes 50 KB later.
        return json(200, { data: { status: `${'a'.repeat(990)}{{secret:${'x'.repeat(50_000)}}}` } });
      }
      if (path === '/html') {
        // A 200 from something in front of the target (a proxy's or a portal's page): no record of anything.
        res.writeHead(200, { 'content-type': 'text/html' });
        return res.end('<html><body>Please sign in</body></html>');
      }
      if (path === '/empty') {
        res.writeHead(200);
        return res.end();
      }
      return json(404, {});
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return { server, base: `http://127.0.0.1:${port}`, seen, port };
}

describe('http connector', () => {
  const connector = new HttpConnector();
  const schema = connector.actions.request.params;
  let t: Awaited<ReturnType<typeof target>>;
  let env: ConnectorEnvironment;
  beforeAll(async () => {
    t = await target();
    env = {
      sandboxUrl: 'unused',
      timeoutMs: 800,
      tenant: {
        // Every secret may go to the target (the tests of a missing secret name several).
        allowHosts: [{ host: '127.0.0.1', ports: [t.port], allow_private: true, secrets: ['*'] }],
        secrets: { crm_token: 's3cr3t-value' },
      },
    };
  });
  afterAll(async () => {
    t.server.closeAllConnections();
    await new Promise((resolve) => t.server.close(resolve));
  });

  let n = 0;
  const op = (
    params: Record<string, unknown>,
    providerRef: Record<string, unknown> | null = null,
  ): ConnectorOperation => {
    n += 1;
    const parsed = schema.safeParse(params);
    if (!parsed.success) throw new Error(JSON.stringify(parsed.error.issues));
    return { id: `op_test${n}`, tenantId: 'demo', action: 'request', params, expectedState: null, providerRef };
  };

  describe('params schema (checked at intake)', () => {
    const issues = (params: Record<string, unknown>) => {
      const parsed = schema.safeParse({ method: 'POST', url: `${t.base}/orders`, ...params });
      return parsed.success ? [] : parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
    };

    it('accepts a full request template', () => {
      expect(
        issues({
          headers: { authorization: 'Bearer {{secret:crm_token}}' },
          body: { id: '{{operation_id}}' },
          reject_statuses: [400, 422],
          read_back: {
            method: 'GET',
            url: `${t.base}/orders/{{operation_id}}`,
            field: '$.data.status',
            equals: 'created',
          },
          context: { url: `${t.base}/orders/{{operation_id}}`, field: 'data.status' },
          idempotency: { header: 'Idempotency-Key' },
          timeout_ms: 500,
        }),
      ).toEqual([]);
    });

    it('accepts one name in two objects, and names that differ otherwise than by case', () => {
      expect(
        issues({
          body: { amount: 1, amount_total: 2, a: { amount: 1 }, b: [{ AMOUNT: 2 }, { Amount: 3 }], c: 'AMOUNT' },
        }),
      ).toEqual([]);
    });

    it('accepts a JSON Content-Type of the operation’s own, and any on a request without a body', () => {
      for (const type of [
        'application/json',
        'Application/JSON;odata.metadata=minimal',
        'application/merge-patch+json; charset="UTF-8"',
        // `utf8` names UTF-8 too: the API takes it for its own bodies, so an agent's operation may as well.
        'application/json; charset=utf8',
      ]) {
        expect([type, issues({ headers: { 'Content-Type': type }, body: { a: 1 } })]).toEqual([type, []]);
      }
      expect(issues({ method: 'DELETE', headers: { 'Content-Type': 'text/plain' } })).toEqual([]);
    });

    it.each([
      [{ url: 'file:///etc/passwd' }, /^url: /],
      [{ url: 'gopher://127.0.0.1:70/' }, /^url: only http/],
      [{ url: 'http://user:pw@example.com/' }, /^url: credentials/],
      [{ url: 'http://2130706433/' }, /^url: IPv4 addresses must be written in dotted-decimal/],
      [{ url: 'http://0177.0.0.1/' }, /dotted-decimal/],
      [{ url: 'http://0x7f.0.0.1/' }, /dotted-decimal/],
      [{ url: 'http://0.0.0.0/' }, /can never be a target/],
      [{ url: 'http://[::]/' }, /can never be a target/],
      [{ url: 'http://{{operation_id}}.example.com/' }, /not allowed in the scheme, host or port/],
      [{ url: 'http://example.com/{{secret:crm_token}}' }, /secrets .* only be used in header values/],
      [{ body: { token: '{{secret:crm_token}}' } }, /^body: secrets/],
      [{ url: 'http://example.com/{{nope}}' }, /unknown template variable/],
      // Never sent: a reviewer would read `&amount=25` or `preview` as part of the request (as for webhook URLs).
      [{ url: 'https://bank.example/v1/payouts?amount=250000#&amount=25' }, /^url: no fragment/],
      [{ url: 'https://bank.example/v1/accounts/acc_1/close#preview' }, /^url: no fragment/],
      [
        { read_back: { url: 'http://example.com/s/{{operation_id}}#', field: 'a', equals: 1 } },
        /^read_back\.url: no fragment/,
      ],
      [{ context: { url: 'http://example.com/s#{{operation_id}}', field: 'a' } }, /^context\.url: no fragment/],
      // Resolved away by the URL parser: an approver and the record would read a path that is not the one called.
      [{ url: 'https://bank.example/v1/accounts/acc_1/../acc_2/close' }, /^url: no dot segment/],
      [{ url: 'https://bank.example/v1/accounts/acc_1/%2e%2e/acc_2/close' }, /^url: no dot segment/],
      [{ url: 'https://bank.example/v1/accounts/acc_1/%2E./acc_2' }, /^url: no dot segment/],
      [{ url: 'https://bank.example/v1/./payouts' }, /^url: no dot segment/],
      [{ url: 'https://bank.example/v1/payouts/{{operation_id}}/..' }, /^url: no dot segment/],
      [{ context: { url: 'http://example.com/a/../s', field: 'a' } }, /^context\.url: no dot segment/],
      [{ headers: { host: 'internal' } }, /^headers\.host: this header is set by Verity/],
      // What a proxy or framework in front of the host would route or re-method by: not what the allowlist judged.
      [{ headers: { 'X-Forwarded-Host': 'internal' } }, /^headers\.X-Forwarded-Host: this header is set by Verity/],
      [{ headers: { Forwarded: 'host=internal' } }, /^headers\.Forwarded: this header is set by Verity/],
      [{ headers: { 'X-Original-URL': '/admin' } }, /^headers\.X-Original-URL: this header is set by Verity/],
      // A CGI-style server (PHP, WSGI) reads X_Forwarded_Host as HTTP_X_FORWARDED_HOST, the same variable.
      [{ headers: { X_Forwarded_Host: 'internal' } }, /^headers\.X_Forwarded_Host: this header is set by Verity/],
      [{ headers: { 'X-Forwarded-Uri': '/admin' } }, /^headers\.X-Forwarded-Uri: this header is set by Verity/],
      [{ headers: { 'X-Original-Host': 'internal' } }, /^headers\.X-Original-Host: this header is set by Verity/],
      [
        {
          read_back: {
            url: 'http://example.com/s/{{operation_id}}',
            headers: { 'X-HTTP-Method-Override': 'DELETE' },
            field: 'a',
            equals: 1,
          },
        },
        /^read_back\.headers\.X-HTTP-Method-Override: this header is set by Verity/,
      ],
      [
        {
          read_back: {
            url: 'http://example.com/s/{{operation_id}}',
            headers: { X_HTTP_Method_Override: 'DELETE' },
            field: 'a',
            equals: 1,
          },
        },
        /^read_back\.headers\.X_HTTP_Method_Override: this header is set by Verity/,
      ],
      [{ headers: { 'x-a': 'a\r\nx-b: b' } }, /no line breaks/],
      // Names ignore case: only the last of the two would be sent.
      [{ headers: { 'X-Op': '{{operation_id}}', 'x-op': 'nothing' } }, /^headers\.x-op: this header is given twice/],
      [
        {
          read_back: {
            url: 'http://example.com/s',
            headers: { 'X-Op': '{{operation_id}}', 'x-OP': '1' },
            field: 'a',
            equals: 1,
          },
        },
        /^read_back\.headers\.x-OP: this header is given twice/,
      ],
      [{ reject_statuses: [408] }, /never 408 or 429/],
      [{ reject_statuses: [500] }, /4xx codes only/],
      [{ read_back: { url: 'http://example.com/{{ref}}', field: 'a', equals: 1 } }, /^ref_field: /],
      [{ read_back: { url: 'http://example.com/', field: 'a' } }, /^read_back\.equals/],
      [{ read_back: { method: 'POST', url: 'http://example.com/', field: 'a', equals: 1 } }, /^read_back\.method/],
      [{ read_back: { url: 'http://example.com/', field: 'a b', equals: 1 } }, /^read_back\.field: a JSON path/],
      [{ method: 'GET', body: { a: 1 } }, /GET request has no body/],
      // One member to a target that binds names ignoring case (Go, ASP.NET): the last wins, not the one a cap reads.
      [{ body: { amount: 1, AMOUNT: 1_000_000 } }, /^body\.AMOUNT: "AMOUNT" names a member .* ignoring case/],
      [{ body: { order: { cost: 1, 'co\u017ft': 9 } } }, /^body\.order\.co\u017ft: "co\u017ft" names a member/],
      [
        { body: { items: [{ kind: 'a', '\u212aind': 'b' }] } },
        /^body\.items\.0\.\u212aind: "\u212aind" names a member/,
      ],
      // The body is JSON: labelled a form or text, a target reads it otherwise than a cap or threshold does.
      [
        { headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, body: { amount: 1, memo: '&amount=9&' } },
        /^headers\.Content-Type: the body is sent as JSON/,
      ],
      [{ headers: { content_type: 'text/plain' }, body: { a: 1 } }, /^headers\.content_type: the body is sent as JSON/],
      [
        { headers: { 'content-type': 'application/json; charset=utf-16' }, body: { a: 1 } },
        /^headers\.content-type: the body is sent as JSON/,
      ],
      [{ headers: { 'content-type': 'application/jsonp' }, body: { a: 1 } }, /^headers\.content-type: the body/],
      [{ idempotency: { header: 'Content-Type' } }, /^idempotency\.header: the idempotency key cannot be the Content/],
      // Set as a member of a plain object, "__proto__" is no member: the call went out without its idempotency key.
      [{ idempotency: { header: '__proto__' } }, /^idempotency\.header: "__proto__" cannot be a header name here/],
      [{ idempotency: { header: '__Proto__' } }, /^idempotency\.header: "__proto__" cannot be a header name here/],
      [{ surprise: true }, /Unrecognized key/],
    ])('refuses %j', (params, message) => {
      expect(issues(params)).toEqual(expect.arrayContaining([expect.stringMatching(message)]));
    });

    // A variable with a brace missing reads no variable: it was sent as written, the same text for every operation (one
    // idempotency key or external id for all, which a provider that deduplicates answers as a replay of the first).
    const HALF = /written \{\{name\}\} .* without its other half, so it would be sent as written/;
    it.each([
      [{ headers: { 'Idempotency-Key': '{{idempotency_key}' } }, 'headers.Idempotency-Key'],
      [{ headers: { 'X-Request-Id': 'req-{{ operation_id }' } }, 'headers.X-Request-Id'],
      [{ headers: { authorization: 'Bearer {{secret:crm_token}' } }, 'headers.authorization'],
      [{ headers: { 'Idempotency-Key': '{idempotency_key}}' } }, 'headers.Idempotency-Key'],
      [{ body: { external_id: '{{operation_id}' } }, 'body'],
      [{ body: { items: [{ ref: 'x-{ operation_id }}' }] } }, 'body'],
      [{ url: 'http://example.com/orders/{{operation_id}' }, 'url'],
      [{ url: 'http://example.com/orders?key={{idempotency_key}&x=1' }, 'url'],
      [
        { ref_field: 'id', read_back: { url: 'http://example.com/orders/{{ ref }', field: 'a', equals: 1 } },
        'read_back.url',
      ],
      [
        {
          read_back: {
            url: 'http://example.com/orders',
            headers: { 'X-Op': '{{operation_id}' },
            field: 'a',
            equals: 1,
          },
        },
        'read_back.headers.X-Op',
      ],
      [{ context: { url: 'http://example.com/s?id={{operation_id}', field: 'a' } }, 'context.url'],
      // A well-formed variable next to it does not make it one.
      [{ headers: { 'X-Both': '{{operation_id}}/{{idempotency_key}' } }, 'headers.X-Both'],
    ])('refuses a template variable with a brace missing: %j', (params, field) => {
      expect(issues(params)).toEqual([expect.stringMatching(new RegExp(`^${field.replace(/\./g, '\\.')}: `))]);
      expect(issues(params)).toEqual([expect.stringMatching(HALF)]);
    });

    it('takes dots that are no dot segment, dot segments in the query, and a read-back URL judged as sent', () => {
      expect(
        issues({
          url: 'https://bank.example/.well-known/a..b/x./...?next=../x&y=%2e%2e',
          read_back: { url: `${t.base}/x/{{operation_id}}/../{{operation_id}}`, field: 'a', equals: 1 },
        }),
      ).toEqual([]);
    });

    it('still takes braces that are no variable: JSON in a string, nested objects, a variable inside braces', () => {
      expect(
        issues({
          headers: { 'X-Meta': '{"a":{"b":1}}', 'X-Op': '{{{operation_id}}}' },
          body: { a: { b: { c: {} } }, text: '{"x":{"y":[1]}}', wrapped: '{{{idempotency_key}}}', one: '{ref}' },
        }),
      ).toEqual([]);
    });
  });

  it('declares per operation: read-back only with a read_back spec, idempotency only with a header', () => {
    expect(operationCapabilities(connector, 'request', { method: 'GET', url: 'http://x/' })).toEqual({
      read_back: false,
      context_read: false,
      provider_idempotency: false,
      reversible: false,
    });
    const full = operationCapabilities(connector, 'request', {
      method: 'GET',
      url: 'http://x/',
      read_back: { url: 'http://x/', field: 'a', equals: 1 },
      idempotency: { header: 'Idempotency-Key' },
    });
    expect(full).toMatchObject({ read_back: true, provider_idempotency: true, context_read: false });
  });

  it.each([
    ['names its ref_field twice', '/orders-twice'],
    ['holds a number a double cannot keep', '/orders-rounded'],
  ])('keeps no ref from an answer that %s: the value read would name another record', async (_, path) => {
    const outcome = await connector.send(
      op({ method: 'POST', url: `${t.base}${path}`, body: { a: 1 }, ref_field: 'id' }),
      env,
    );
    expect(outcome).toEqual({
      status: OperationStatus.ACKNOWLEDGED,
      providerRef: { status: 201 },
      detail: 'provider answered 201',
    });
    // Its read-back is not made, and says that an answer came without a reference to read (not that none came).
    const read = await connector.readBack(
      op(
        {
          method: 'POST',
          url: `${t.base}${path}`,
          body: { a: 1 },
          ref_field: 'id',
          read_back: { url: `${t.base}/orders/{{ref}}`, field: 'data.status', equals: 'created' },
        },
        outcome.status === OperationStatus.ACKNOWLEDGED ? outcome.providerRef : null,
      ),
      env,
    );
    expect(read).toMatchObject({
      kind: 'unreachable',
      notMade: true,
      evidence: { error: expect.stringContaining('its answer gave none that can be read at ref_field') },
    });
  });

  it.each(['items[1].id', 'items[01].id', 'items.001.id'])(
    'keeps no ref at %s of an answer that names the id there twice, however the index is written',
    async (refField) => {
      const outcome = await connector.send(
        op({ method: 'POST', url: `${t.base}/orders-listed`, body: { a: 1 }, ref_field: refField }),
        env,
      );
      expect(outcome).toEqual({
        status: OperationStatus.ACKNOWLEDGED,
        providerRef: { status: 201 },
        detail: 'provider answered 201',
      });
    },
  );

  it('keeps the ref, and reads back the field, of an answer whose JSON reads two ways only where neither is read', async () => {
    const params = {
      method: 'POST',
      url: `${t.base}/orders-elsewhere`,
      body: { a: 1 },
      ref_field: 'id',
      read_back: { url: `${t.base}/read-elsewhere?ref={{ref}}`, field: 'data.status', equals: 'created' },
    };
    const outcome = await connector.send(op(params), env);
    expect(outcome).toMatchObject({ status: OperationStatus.ACKNOWLEDGED, providerRef: { status: 201, ref: 'srv-a' } });
    const read = await connector.readBack(
      op(params, outcome.status === OperationStatus.ACKNOWLEDGED ? outcome.providerRef : null),
      env,
    );
    expect(read).toMatchObject({ kind: 'found', evidence: { record: { 'data.status': 'created' } } });
    // Read at the number no double keeps, the same answer is no reading.
    const atSeq = await connector.readBack(
      op(
        { ...params, read_back: { ...params.read_back, field: 'seq', equals: 1 } },
        outcome.status === OperationStatus.ACKNOWLEDGED ? outcome.providerRef : null,
      ),
      env,
    );
    expect(atSeq).toMatchObject({
      kind: 'unreachable',
      evidence: { error: expect.stringContaining('holds a number at seq that a double cannot keep exactly') },
    });
  });

  it('sends the template with secrets, operation id and idempotency key; ACKNOWLEDGED keeps only status and ref', async () => {
    const o = op({
      method: 'POST',
      url: `${t.base}/orders`,
      headers: { authorization: 'Bearer {{secret:crm_token}}', 'x-op': '{{operation_id}}' },
      body: { id: '{{operation_id}}', note: 'hi' },
      idempotency: { header: 'Idempotency-Key' },
      ref_field: 'id',
    });
    const outcome = await connector.send(o, env);
    expect(outcome).toEqual({
      status: OperationStatus.ACKNOWLEDGED,
      providerRef: { status: 201, ref: `srv-${o.id}` },
      detail: 'provider answered 201',
    });
    const request = t.seen[t.seen.length - 1];
    expect(request.headers.authorization).toBe('Bearer s3cr3t-value');
    expect(request.headers['x-op']).toBe(o.id);
    expect(request.headers['idempotency-key']).toBe(`verity-${o.id}`);
    expect(JSON.parse(request.body)).toEqual({ id: o.id, note: 'hi' });
    expect(JSON.stringify(outcome)).not.toContain('s3cr3t-value');
  });

  it('maps declared rejections to FAILED, and everything ambiguous to UNKNOWN', async () => {
    const send = (path: string, extra: Record<string, unknown> = {}) =>
      connector.send(op({ method: 'POST', url: `${t.base}${path}`, body: {}, ...extra }), env);
    expect(await send('/reject', { reject_statuses: [422] })).toMatchObject({
      status: OperationStatus.FAILED,
      reason: TerminalReason.CONNECTOR_REJECTED,
      providerError: { code: 'invalid_order' },
    });
    expect(await send('/reject')).toMatchObject({ status: OperationStatus.UNKNOWN });
    expect(await send('/conflict', { reject_statuses: [422] })).toMatchObject({ status: OperationStatus.UNKNOWN });
    expect(await send('/boom', { reject_statuses: [422] })).toMatchObject({ status: OperationStatus.UNKNOWN });
    expect(await send('/slow')).toMatchObject({
      status: OperationStatus.UNKNOWN,
      detail: 'outcome unknown (ETIMEDOUT)',
    });
  });

  it('does not follow redirects: a 302 is an ambiguous answer, and its target is never requested', async () => {
    const before = t.seen.length;
    expect(await connector.send(op({ method: 'POST', url: `${t.base}/redirect`, body: {} }), env)).toMatchObject({
      status: OperationStatus.UNKNOWN,
    });
    expect(t.seen.slice(before).map((s) => s.url)).toEqual(['/redirect']);
  });

  it('refuses before sending: a host off the allowlist, another port, a missing secret, no tenant settings', async () => {
    const before = t.seen.length;
    const refused = async (params: Record<string, unknown>, e: ConnectorEnvironment = env) =>
      connector.send(op({ method: 'POST', body: {}, ...params }), e);
    expect(await refused({ url: `http://localhost:${t.port}/orders` })).toMatchObject({
      status: OperationStatus.FAILED,
      reason: TerminalReason.SOURCE_UNREACHABLE,
      detail: expect.stringMatching(/^not sent: egress refused: host localhost is not on this tenant's allowlist/),
      // The cause the status model makes a policy failure of, and the rule in words.
      refused: { cause: 'egress_refused', rule: "host localhost is not on this tenant's allowlist" },
    });
    expect(await refused({ url: `http://127.0.0.1:${t.port + 1}/orders` })).toMatchObject({
      detail: expect.stringMatching(/port/),
      refused: { cause: 'egress_refused', rule: `port ${t.port + 1} is not allowed for host 127.0.0.1` },
    });
    // A missing secret is not the egress policy, but a refusal of its own: it stays until an admin sets the secret.
    expect(
      await refused({ url: `${t.base}/orders`, headers: { authorization: 'Bearer {{secret:other}}' } }),
    ).toMatchObject({
      status: OperationStatus.FAILED,
      detail: 'not sent: secret "other" is not set for this tenant',
      refused: { cause: 'secret_not_set', rule: 'secret "other" is not set for this tenant' },
    });
    // A name the tenant never set is missing, whatever an object's prototype holds under it.
    for (const name of ['constructor', '__proto__', 'valueOf', 'toString', 'hasOwnProperty']) {
      expect(
        await refused({ url: `${t.base}/orders`, headers: { authorization: `Bearer {{secret:${name}}}` } }),
      ).toMatchObject({
        status: OperationStatus.FAILED,
        detail: `not sent: secret "${name}" is not set for this tenant`,
      });
    }
    expect(await refused({ url: `${t.base}/orders` }, { ...env, tenant: undefined })).toMatchObject({
      status: OperationStatus.FAILED,
      reason: TerminalReason.SOURCE_UNREACHABLE,
    });
    expect(t.seen.length).toBe(before);
  });

  describe('a secret goes only to a host whose allowlist entry binds it', () => {
    /** The target allowlisted as before, binding only `bound` (or nothing). */
    const binding = (secrets?: string[]): ConnectorEnvironment => ({
      ...env,
      tenant: {
        ...env.tenant,
        allowHosts: [{ host: '127.0.0.1', ports: [t.port], allow_private: true, ...(secrets ? { secrets } : {}) }],
      },
    });
    const request = (extra: Record<string, unknown> = {}) =>
      op({
        method: 'POST',
        url: `${t.base}/orders`,
        headers: { 'x-t': 'Bearer {{secret:crm_token}}' },
        body: { id: `bind-${n}` },
        ...extra,
      });
    const refusal = () =>
      `secret "crm_token" may not be sent to 127.0.0.1:${t.port}: the tenant's allowlist entry for it does not bind it (allow_hosts[].secrets)`;

    it('send: not bound (entry without secrets, or naming others) → FAILED secret_not_bound, and the target saw nothing', async () => {
      const before = t.seen.length;
      for (const e of [binding(), binding([]), binding(['other_token'])]) {
        expect(await connector.send(request(), e)).toEqual({
          status: OperationStatus.FAILED,
          reason: TerminalReason.SOURCE_UNREACHABLE,
          detail: `not sent: ${refusal()}`,
          refused: { cause: 'secret_not_bound', rule: refusal() },
        });
      }
      expect(t.seen.length).toBe(before);
      // The refusal names the secret and the host, never its value.
      expect(refusal()).not.toContain('s3cr3t-value');
    });

    it('send: bound by name or by "*" → the target receives the header with the secret', async () => {
      for (const secrets of [['crm_token'], ['*']]) {
        const before = t.seen.length;
        expect(await connector.send(request(), binding(secrets))).toMatchObject({
          status: OperationStatus.ACKNOWLEDGED,
        });
        expect(t.seen.slice(before).map((s) => s.headers['x-t'])).toEqual(['Bearer s3cr3t-value']);
      }
    });

    it('read-back and context read: not made when not bound (inconclusive, the target saw nothing); made when bound', async () => {
      const created = request();
      await connector.send(created, binding(['crm_token']));
      const id = (created.params.body as { id: string }).id;
      const reads = {
        read_back: {
          url: `${t.base}/orders/${id}`,
          headers: { 'x-t': '{{secret:crm_token}}' },
          field: '$.data.status',
          equals: 'created',
        },
        context: { url: `${t.base}/orders/${id}`, headers: { 'x-t': '{{secret:crm_token}}' }, field: 'data.status' },
      };
      const before = t.seen.length;
      const unbound = binding(['other_token']);
      expect(await connector.readBack(request(reads), unbound)).toEqual({
        kind: 'unreachable',
        notMade: true,
        evidence: {
          source: `${t.base}/orders/${id}`,
          read_at: expect.any(String),
          field: 'data.status',
          error: refusal(),
        },
      });
      expect(await connector.readContext(request(reads), unbound)).toMatchObject({
        kind: 'unreachable',
        evidence: { error: refusal() },
      });
      expect(t.seen.length).toBe(before);
      const bound = binding(['crm_token']);
      expect(await connector.readBack(request(reads), bound)).toMatchObject({ kind: 'found' });
      expect(await connector.readContext(request(reads), bound)).toMatchObject({ kind: 'state' });
      expect(t.seen.slice(before).map((s) => s.headers['x-t'])).toEqual(['s3cr3t-value', 's3cr3t-value']);
    });

    it('a host off the allowlist stays the egress refusal', async () => {
      expect(await connector.send(request({ url: `http://localhost:${t.port}/orders` }), binding())).toMatchObject({
        refused: { cause: 'egress_refused' },
      });
    });
  });

  describe('a secret goes over plain http only within the operator’s own network', () => {
    // Over http:// a bound secret crossed whatever networks lie between Verity and the host's address, readable (and
    // answerable: DNS is not authenticated, only TLS proves the other end) by anyone on the way.
    const PUBLIC = '93.184.216.34';
    const names: Record<string, string[]> = {
      'crm.internal': ['127.0.0.1'],
      'crm.example': [PUBLIC],
      'mixed.example': ['127.0.0.1', PUBLIC],
    };
    const lookups: string[] = [];
    const resolving = new HttpConnector({
      resolver: async (name) => {
        lookups.push(name);
        return (names[name] ?? []).map((address) => ({ address, family: 4 }));
      },
    });
    const entries = (allow_private: boolean): ConnectorEnvironment => ({
      ...env,
      tenant: {
        ...env.tenant,
        allowHosts: [
          ...Object.keys(names).map((host) => ({ host, allow_private, secrets: ['crm_token'] })),
          { host: PUBLIC, allow_private, secrets: ['crm_token'] },
          { host: '127.0.0.1', ports: [t.port], allow_private, secrets: ['crm_token'] },
        ],
      },
    });
    const call = (url: string, headers: Record<string, string> = { 'x-t': 'Bearer {{secret:crm_token}}' }) =>
      op({ method: 'POST', url, headers, body: { id: `plain-${n}` } });
    const plain = (target: string, category: string) =>
      `a secret may not be sent over plain http:// to ${target}: it reaches a ${category} address, where the secret can be read on the way, and answered, by whoever is between; use https://`;

    it('an entry that allows private addresses: sent to a loopback or private address, refused at a public one', async () => {
      const before = t.seen.length;
      for (const [url, target] of [
        [`http://crm.example:${t.port}/orders`, `crm.example:${t.port}`],
        [`http://mixed.example:${t.port}/orders`, `mixed.example:${t.port}`],
        [`http://${PUBLIC}:${t.port}/orders`, `${PUBLIC}:${t.port}`],
      ]) {
        expect(await resolving.send(call(url), entries(true))).toEqual({
          status: OperationStatus.FAILED,
          reason: TerminalReason.SOURCE_UNREACHABLE,
          detail: `not sent: ${plain(target, 'public')}`,
          refused: { cause: 'secret_not_bound', rule: plain(target, 'public') },
        });
      }
      expect(t.seen.length).toBe(before);
      expect(lookups).toEqual(expect.arrayContaining(['crm.example', 'mixed.example']));
      // A read carrying the secret is not made either: inconclusive, with the reason.
      const read = op({
        method: 'POST',
        url: `${t.base}/orders`,
        context: {
          url: `http://crm.example:${t.port}/orders/x`,
          headers: { 'x-t': '{{secret:crm_token}}' },
          field: 'data.status',
        },
      });
      expect(await resolving.readContext(read, entries(true))).toMatchObject({
        kind: 'unreachable',
        notMade: true,
        evidence: { error: plain(`crm.example:${t.port}`, 'public') },
      });
      expect(t.seen.length).toBe(before);
      // At a loopback address, by name or as written, it is sent.
      for (const url of [`http://crm.internal:${t.port}/orders`, `${t.base}/orders`]) {
        const sent = t.seen.length;
        expect(await resolving.send(call(url), entries(true))).toMatchObject({ status: OperationStatus.ACKNOWLEDGED });
        expect(t.seen.slice(sent).map((s) => s.headers['x-t'])).toEqual(['Bearer s3cr3t-value']);
      }
    });

    it('an entry that does not allow private addresses: never over plain http, refused before any lookup', async () => {
      const message = `secret "crm_token" may not be sent to crm.example:80 over plain http://: on the way it can be read, and answered, by whoever is between (only an entry with allow_private may take one in cleartext, and only at a private or loopback address); use https://`;
      lookups.length = 0;
      expect(await resolving.send(call('http://crm.example/orders'), entries(false))).toEqual({
        status: OperationStatus.FAILED,
        reason: TerminalReason.SOURCE_UNREACHABLE,
        detail: `not sent: ${message}`,
        refused: { cause: 'secret_not_bound', rule: message },
      });
      // Refused before any lookup: nothing was asked of DNS, nothing left.
      expect(lookups).toEqual([]);
    });
  });

  describe('read-back', () => {
    const readBack = (url: string, equals: unknown = 'created', extra: Record<string, unknown> = {}, ref = null) =>
      connector.readBack(
        op(
          {
            method: 'POST',
            url: `${t.base}/orders`,
            body: {},
            read_back: { url, field: '$.data.status', equals },
            ...extra,
          },
          ref,
        ),
        env,
      );

    it('is found when the field equals the declared value; evidence holds the field, never the body', async () => {
      const o = op({ method: 'POST', url: `${t.base}/orders`, body: { id: 'rb-1' } });
      await connector.send(o, env);
      const read = await readBack(`${t.base}/orders/rb-1`);
      expect(read).toEqual({
        kind: 'found',
        evidence: {
          source: `${t.base}/orders/rb-1`,
          read_at: expect.any(String),
          field: 'data.status',
          status: 200,
          record: { 'data.status': 'created' },
          expected: 'created',
        },
      });
      expect(JSON.stringify(read)).not.toContain('"id"');
    });

    it('reports a mismatch, absence (404), a missing field, an unreachable source, and an oversized body', async () => {
      expect(await readBack(`${t.base}/orders/rb-1`, 'shipped')).toMatchObject({
        kind: 'mismatch',
        fields: ['data.status'],
      });
      expect(await readBack(`${t.base}/orders/nope`)).toMatchObject({ kind: 'absent' });
      expect(await readBack(`${t.base}/no-field`)).toMatchObject({ kind: 'field_missing', field: '$.data.status' });
      // An answer that is no JSON at all holds no record to miss a field of: unread, not "a record without the field"
      // (which would count as the effect shown, and refuse a person's FAILED for good).
      for (const path of ['/html', '/empty']) {
        expect(await readBack(`${t.base}${path}`)).toMatchObject({
          kind: 'unreachable',
          evidence: { status: 200, error: expect.stringContaining('not JSON') },
        });
      }
      // Text shaped like a redaction marker that names no secret of the tenant is the target's own: cut at 1000
      // characters like any other, not kept whole because the cut fell inside it.
      const forged = await readBack(`${t.base}/forged-marker`);
      expect(forged).toMatchObject({ kind: 'mismatch' });
      const kept = (forged as { evidence: { record: Record<string, string> } }).evidence.record['data.status'];
      expect(kept.length).toBeLessThanOrEqual(1001);
      // The source answered badly: it may answer later (not "not made").
      const boom = await readBack(`${t.base}/boom`);
      expect(boom).toMatchObject({ kind: 'unreachable', evidence: { error: 'status 500' } });
      expect(boom).not.toHaveProperty('notMade');
      expect(await readBack(`${t.base}/big`)).toMatchObject({
        kind: 'unreachable',
        evidence: { error: expect.stringMatching(/larger/) },
      });
      // Refused by the tenant's egress policy before anything left: not made, whatever the source would say.
      expect(await readBack(`http://localhost:${t.port}/orders/rb-1`)).toMatchObject({
        kind: 'unreachable',
        notMade: true,
        evidence: { error: expect.stringMatching(/egress refused/) },
      });
    });

    it('a 200 whose path to the field runs out at a list with no entry there, or at a null, found no record: absent, never "a record without the field"', async () => {
      // A record without its field counts as the effect shown (a person's FAILED is refused for good, 409 effect-exists):
      // a search that answered "no match" — or, lagging, "none yet" — shows no effect at all.
      const at = (url: string, field: string) =>
        connector.readBack(
          op({ method: 'POST', url: `${t.base}/orders`, body: {}, read_back: { url, field, equals: 'created' } }),
          env,
        );
      for (const [path, field] of [
        ['/no-match', 'data[0].status'],
        ['/no-match', '$.data.0.status'],
        ['/no-match', 'data.status'],
        ['/no-match-null', 'data.status'],
        ['/no-match-null', 'data[0].status'],
        ['/one-match', 'data[1].status'],
      ]) {
        expect([path, field, await at(`${t.base}${path}`, field)]).toEqual([
          path,
          field,
          {
            kind: 'absent',
            evidence: expect.objectContaining({ source: `${t.base}${path}`, status: 200, record: null }),
          },
        ]);
      }
      // An entry that is there without the field is a record without it (as an object without it is).
      expect(await at(`${t.base}/one-match`, 'data[0].status')).toMatchObject({ kind: 'field_missing' });
      expect(await at(`${t.base}/no-field`, 'data.status')).toMatchObject({ kind: 'field_missing' });
    });

    it('a 200 that holds the field reads it, whatever its value or spelling: only a path that runs out at no record is absent', async () => {
      // The value at the field itself null or a list (empty too) is a value read; an object's member "0" is read by
      // data[0] as by data.0 (one path parser, fieldSegments, for the read and for what counts as no record); a
      // top-level list is a search answer like any other.
      const at = (body: unknown, field: string) =>
        connector.readBack(
          op({
            method: 'POST',
            url: `${t.base}/orders`,
            body: {},
            read_back: {
              url: `${t.base}/as-json?${new URLSearchParams({ body: JSON.stringify(body) })}`,
              field,
              equals: 'created',
            },
          }),
          env,
        );
      const cases: [unknown, string, string][] = [
        [{ data: { status: null } }, 'data.status', 'mismatch'],
        [{ data: { status: null } }, '$.data.status', 'mismatch'],
        [{ data: { status: [] } }, 'data.status', 'mismatch'],
        [{ data: [] }, 'data', 'mismatch'],
        [{ data: null }, '$.data', 'mismatch'],
        [{ data: { '0': { status: 'created' } } }, 'data[0].status', 'found'],
        [{ data: { '0': { status: 'created' } } }, 'data.0.status', 'found'],
        [{ data: { '0': {} } }, 'data[0].status', 'field_missing'],
        [[{ status: 'created' }], '0.status', 'found'],
        [[{ id: 'rb-9' }], '0.status', 'field_missing'],
        [[], '0.status', 'absent'],
        [{ data: [null] }, 'data[0].status', 'absent'],
        [{ data: [{ id: 'rb-9' }] }, 'data.length', 'field_missing'],
        // A null inside a record that is there (it holds a value: its id) is that record without the field, not "no
        // record": read as absent, a person could answer FAILED while the record exists.
        [{ data: { id: 'o_1', attributes: null } }, 'data.attributes.status', 'field_missing'],
        [{ data: [{ id: 'o_1', attributes: null }] }, 'data[0].attributes.status', 'field_missing'],
        [{ data: { id: 'o_1', attributes: { meta: null } } }, 'data.attributes.meta.status', 'field_missing'],
        // A null where the record goes, at the top of the answer or in a wrapper that holds nothing else, is no record.
        [{ data: null, meta: { total: 0 } }, 'data.status', 'absent'],
        [{ result: { data: null } }, 'result.data.status', 'absent'],
        [{ data: { attributes: null, links: null } }, 'data.attributes.status', 'absent'],
      ];
      for (const [body, field, kind] of cases) {
        expect([body, field, (await at(body, field)).kind]).toEqual([body, field, kind]);
      }
    });

    it('substitutes {{ref}} from the acknowledgement, and cannot read without one', async () => {
      const o = op({ method: 'POST', url: `${t.base}/orders`, body: { id: 'rb-2' } });
      await connector.send(o, env);
      const spec = { ref_field: 'id' };
      expect(await readBack(`${t.base}/orders/{{ref}}`, 'created', spec, { ref: 'rb-2' } as never)).toMatchObject({
        kind: 'found',
      });
      expect(await readBack(`${t.base}/orders/{{ref}}`, 'created', spec)).toMatchObject({ kind: 'unreachable' });
      // A reference stored redacted (it held a secret value) would name another record: no read, no verdict of absence.
      const redacted = await readBack(`${t.base}/orders/{{ref}}`, 'created', spec, {
        ref: '{{secret:ACCOUNT}}',
      } as never);
      expect(redacted).toMatchObject({ kind: 'unreachable', evidence: { error: expect.stringContaining('redacted') } });
      // The same when the reference goes into a read-back header.
      // A read of rb-2 whose header carries the reference.
      const refInHeader = (header: string) => ({
        ...spec,
        read_back: {
          url: `${t.base}/orders/rb-2`,
          field: '$.data.status',
          equals: 'created',
          headers: { 'x-order': header },
        },
      });
      const inHeader = await readBack(`${t.base}/orders/rb-2`, 'created', refInHeader('{{ref}}'), {
        ref: '{{secret:ACCOUNT}}',
      } as never);
      expect(inHeader).toMatchObject({ kind: 'unreachable', evidence: { error: expect.stringContaining('redacted') } });
      // A reference a header cannot carry as written: Node refused it (the read threw: "read-back error"), or sent
      // other bytes (Latin-1) than a UTF-8 target reads. Not made, saying why; in a URL it is percent-encoded.
      const before = t.seen.length;
      for (const ref of ['rb-2\r\nx-admin: 1', 'rb-\u65e5\u672c', 'caf\u00e9', 'rb\u0000']) {
        const read = await readBack(`${t.base}/orders/rb-2`, 'created', refInHeader('id {{ref}}'), { ref } as never);
        expect([ref, read]).toMatchObject([
          ref,
          { kind: 'unreachable', notMade: true, evidence: { error: expect.stringContaining('a header cannot carry') } },
        ]);
      }
      // A reference stored with U+FFFD (text Postgres could not store) is refused for what it is, also in a header: its
      // answer was received, so the read is one that could not be made from it, not one never made.
      const replaced = await readBack(`${t.base}/orders/rb-2`, 'created', refInHeader('id {{ref}}'), {
        ref: 'rb-\ufffd',
      } as never);
      expect(replaced).toMatchObject({
        kind: 'unreachable',
        evidence: { error: expect.stringContaining('stored replaced by U+FFFD') },
      });
      expect(replaced).not.toHaveProperty('notMade');
      expect(t.seen.length).toBe(before);
      expect(await readBack(`${t.base}/orders/{{ref}}`, 'created', spec, { ref: 'caf\u00e9' } as never)).toMatchObject({
        kind: 'absent',
      });
    });

    it('reads no reference longer than the 200 characters kept: its first 200 name another record', async () => {
      // A provider whose references share a long prefix (a URL of its own, say): two of them differ past the 200th
      // character. The first call's record exists; the second call did nothing.
      const prefix = `https://shop.example/${'a'.repeat(175)}`; // `srv-` and this: 200 characters
      const made = op({ method: 'POST', url: `${t.base}/orders`, body: { id: prefix }, ref_field: 'id' });
      const first = await connector.send(made, env);
      expect(first).toMatchObject({ status: 'ACKNOWLEDGED', providerRef: { ref: `srv-${prefix}` } });
      const params = {
        method: 'POST',
        url: `${t.base}/orders-unrecorded`,
        body: { id: `${prefix}/7` },
        ref_field: 'id',
        read_back: { url: `${t.base}/lookup?ref={{ref}}`, field: '$.data.status', equals: 'created' },
      };
      const sent = await connector.send(op(params), env);
      expect(sent.status).toBe('ACKNOWLEDGED');
      const providerRef = (sent as { providerRef: Record<string, unknown> }).providerRef;
      const before = t.seen.length;
      const read = await connector.readBack(op(params, providerRef), env);
      // It read the first call's record (`?ref=srv-<prefix>`) and VERIFIED the second, which did nothing.
      expect(read).toMatchObject({
        kind: 'unreachable',
        evidence: { error: expect.stringContaining('longer than the 200 characters kept') },
      });
      expect(t.seen.length).toBe(before);
    });

    it('reads a reference with empty or dot parts between slashes in the query, never in the path', async () => {
      // A provider whose reference is a URL (`srv-https://…`: an empty part between the two slashes).
      const id = 'https://shop.example/orders/../7/';
      await connector.send(op({ method: 'POST', url: `${t.base}/orders`, body: { id } }), env);
      const spec = { ref_field: 'id' };
      const ref = { ref: `srv-${id}` } as never;
      // In the query a decoding proxy routes by the path alone: the reference is read as the value it is.
      expect(await readBack(`${t.base}/lookup?ref={{ref}}`, 'created', spec, ref)).toMatchObject({ kind: 'found' });
      // In the path it would be resolved to another URL: not read.
      expect(await readBack(`${t.base}/orders/{{ref}}`, 'created', spec, ref)).toMatchObject({
        kind: 'unreachable',
        notMade: true,
        evidence: { error: expect.stringContaining('dot segment') },
      });
    });

    it('without a read_back spec there is nothing to read', async () => {
      expect(await connector.readBack(op({ method: 'GET', url: `${t.base}/orders/x` }), env)).toMatchObject({
        kind: 'unreachable',
      });
    });
  });

  it('reads context: the current value, and whether the requested state is already there', async () => {
    const o = op({ method: 'POST', url: `${t.base}/orders`, body: { id: 'ctx-1' } });
    await connector.send(o, env);
    const context = (equals?: unknown) =>
      connector.readContext(
        op({
          method: 'POST',
          url: `${t.base}/orders`,
          body: {},
          context: { url: `${t.base}/orders/ctx-1`, field: 'data.status', ...(equals === undefined ? {} : { equals }) },
        }),
        env,
      );
    expect(await context('created')).toMatchObject({
      kind: 'state',
      state: { 'data.status': 'created' },
      requestedStatePresent: true,
    });
    expect(await context()).toMatchObject({ kind: 'state', requestedStatePresent: false });
  });
});

describe('http connector: a target whose answer never ends', () => {
  const connector = new HttpConnector();
  const rejecting = endlessAnswerServer(422);
  const accepting = endlessAnswerServer(200);
  const rejectingUrl = serveDuringDescribe(() => rejecting.server);
  const acceptingUrl = serveDuringDescribe(() => accepting.server);
  // Far beyond the tests' own timeouts: only a connector that stops reading at the limit answers within them.
  const env = (port: number): ConnectorEnvironment => ({
    sandboxUrl: 'unused',
    timeoutMs: 60_000,
    tenant: { allowHosts: [{ host: '127.0.0.1', ports: [port], allow_private: true }], secrets: {} },
  });
  const op = (params: Record<string, unknown>): ConnectorOperation => ({
    id: 'op_endless',
    tenantId: 'demo',
    action: 'request',
    params,
    expectedState: null,
    providerRef: null,
  });

  it('a declared rejection whose body is past the limit is judged by its status, as with a small body', async () => {
    // reject_statuses needs no error body: the status alone is the rejection, whatever the body's size.
    const outcome = await connector.send(
      op({ method: 'POST', url: `${rejectingUrl.url}/orders`, body: {}, reject_statuses: [422] }),
      env(rejectingUrl.port),
    );
    expect(outcome).toEqual({
      status: OperationStatus.FAILED,
      reason: TerminalReason.CONNECTOR_REJECTED,
      detail: 'provider rejected the request (422)',
      providerError: undefined,
    });
    await rejecting.closed[0];
  }, 20_000);

  it('a 2xx past the limit: the {{ref}} read-back names the unread body as why it has no reference', async () => {
    const params = {
      method: 'POST',
      url: `${acceptingUrl.url}/orders`,
      body: {},
      ref_field: 'id',
      read_back: { url: `${acceptingUrl.url}/orders/{{ref}}`, field: 'id', equals: 'x' },
    };
    const sent = await connector.send(op(params), env(acceptingUrl.port));
    if (sent.status !== OperationStatus.ACKNOWLEDGED) throw new Error(`not acknowledged: ${sent.detail}`);
    expect(sent.providerRef).toEqual({ status: 200, body_not_read: 'larger than the connector reads' });
    const back = await connector.readBack({ ...op(params), providerRef: sent.providerRef }, env(acceptingUrl.port));
    expect(back).toMatchObject({ kind: 'unreachable', notMade: true });
    const error = String((back as { evidence: Record<string, unknown> }).evidence.error);
    expect(error).toContain("its answer's body was larger than the connector reads (64 KiB): it was not read");
    expect(error).not.toContain('missing, not a string or number');
    expect(accepting.answers).toBe(1);
  }, 20_000);

  it('a read of it is inconclusive ("larger than"), answered at the limit, the connection closed', async () => {
    const read = await connector.readContext(
      op({
        method: 'POST',
        url: `${acceptingUrl.url}/orders`,
        body: {},
        context: { url: `${acceptingUrl.url}/orders/1`, field: 'id' },
      }),
      env(acceptingUrl.port),
    );
    expect(read).toMatchObject({ kind: 'unreachable', evidence: { error: expect.stringContaining('larger than') } });
    await accepting.closed[0];
  }, 20_000);
});
