import { connect } from 'node:net';
import { DEMO, METRICS_TOKEN, Stack } from '../support/stack';
import { charge, http, rawExchange as rawExchangeWith, submission, unique } from '../support/http';
import type { ProblemDetails as Problem } from '@verity/sdk';

/**
 * Edges of the wire contract found from outside (red team, contract pass): every refusal is a 4xx
 * application/problem+json that names the field the caller actually sent (I10), including the requests Node would
 * answer itself, and nothing is written.
 */

type FieldProblem = Problem & { errors: { field: string; rule: string }[] };

describe('contract edges: problems name what the caller sent', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'apiedges', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  const count = async (table: string) =>
    ((await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM ${table}`)) as { n: number }[])[0].n;

  // Written, not ended: the server answers and closes (a half-closed socket would be closed before the answer).
  const rawExchange = (bytes: string) => rawExchangeWith(stack.apiUrl, bytes, { halfClose: false });

  it('answers an HTTP/1.1 request without Host with a problem+json 400 (Node answered a bare 400), writing nothing', async () => {
    const before = await count('executions');
    const body = JSON.stringify(submission([charge(unique('nohost'))]));
    const answer = await rawExchange(
      'POST /v1/executions HTTP/1.1\r\n' +
        `authorization: Bearer ${DEMO.agent}\r\ncontent-type: application/json\r\n` +
        `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    expect(answer.status).toBe(400);
    expect(answer.headers['content-type']).toBe('application/problem+json; charset=utf-8');
    expect(answer.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    expect(JSON.parse(answer.body)).toMatchObject({
      status: 400,
      type: 'https://verity.dev/problems/bad-request',
      detail: expect.stringMatching(/Host/),
    });
    expect(await count('executions')).toBe(before);
    // More than one Host: also a 400 (RFC 9112, section 3.2); Node kept the first without a word.
    const twice = await rawExchange(
      'GET /v1/status-model HTTP/1.1\r\nhost: a.example\r\nhost: b.example\r\nconnection: close\r\n\r\n',
    );
    expect(twice.status).toBe(400);
    expect(JSON.parse(twice.body)).toMatchObject({ type: 'https://verity.dev/problems/bad-request', status: 400 });
    // HTTP/1.0 has no Host requirement: still served.
    const old = await rawExchange('GET /v1/status-model HTTP/1.0\r\n\r\n');
    expect(old.status).toBe(200);
  });

  /**
   * Red team (hostile pass 3): `OPTIONS *` asks about the server itself (RFC 9110, section 9.3.7), and the router read
   * `*` as `/`: 405, "takes GET, HEAD", as if `*` were a resource. It is answered 204 with the methods the server
   * implements; `*` with any other method is no request target at all (RFC 9112, section 3.2.4): 400.
   */
  it('answers OPTIONS * about the server (204, Allow), and refuses * with any other method (400)', async () => {
    const options = await rawExchange('OPTIONS * HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n');
    expect(options.status).toBe(204);
    expect(options.headers.allow).toBe('DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT');
    expect(options.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    expect(options.body).toBe('');
    for (const method of ['GET', 'HEAD', 'POST', 'DELETE']) {
      const other = await rawExchange(
        `${method} * HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n`,
      );
      expect({ method, status: other.status }).toEqual({ method, status: 400 });
      if (method !== 'HEAD') {
        expect(JSON.parse(other.body)).toMatchObject({
          type: 'https://verity.dev/problems/bad-request',
          detail: expect.not.stringMatching(/takes/),
        });
      }
    }
  });

  it('names the Last-Event-ID header, not the `after` query parameter, when the header is what is wrong', async () => {
    const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('lei'))]),
    });
    expect(created.status).toBe(201);
    const stream = `/v1/executions/${created.body.id}/stream`;
    for (const value of ['evt_nothere', 'garbage', '99999']) {
      const res = await http<FieldProblem>(stack.apiUrl, 'GET', stream, {
        key: DEMO.agent,
        headers: { 'last-event-id': value },
      });
      expect(res.status).toBe(400);
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(res.body.errors).toEqual([expect.objectContaining({ field: 'Last-Event-ID', rule: 'known_event' })]);
    }
    // The query parameter is still named as itself.
    const query = await http<FieldProblem>(stack.apiUrl, 'GET', `${stream}?after=garbage`, { key: DEMO.agent });
    expect(query.status).toBe(400);
    expect(query.body.errors).toEqual([expect.objectContaining({ field: 'after', rule: 'known_event' })]);
  });

  it('names a member or query parameter with an empty name as such, not as the whole body', async () => {
    const before = await count('executions');
    const body = { ...submission([charge(unique('emptyname'))]), '': 1 };
    const res = await http<FieldProblem>(stack.apiUrl, 'POST', '/v1/executions', { key: DEMO.agent, body });
    expect(res.status).toBe(400);
    expect(res.body.errors).toEqual([expect.objectContaining({ field: '[""]', rule: 'unknown_field' })]);
    const nested = submission([{ ...charge(unique('emptyname')), params: { ...charge('x').params, '': 2 } }]);
    const inner = await http<FieldProblem>(stack.apiUrl, 'POST', '/v1/executions', { key: DEMO.agent, body: nested });
    expect(inner.status).toBe(400);
    expect(inner.body.errors.map((e) => e.field)).toContain('operations[0].params[""]');
    const listed = await http<FieldProblem>(stack.apiUrl, 'GET', '/v1/executions?=5', { key: DEMO.agent });
    expect(listed.status).toBe(400);
    expect(listed.body.errors).toEqual([expect.objectContaining({ field: '[""]', rule: 'unknown_field' })]);
    expect(await count('executions')).toBe(before);
  });

  it('refuses a body on an endpoint that takes none, and does nothing (unknown fields are rejected, never dropped)', async () => {
    const admin = { key: DEMO.admin };
    const settings = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      ...admin,
      body: {
        allow_hosts: [{ host: 'example.com', secrets: ['crm_token'] }],
        secrets: { crm_token: 'a-token-value-1' },
      },
    });
    expect(settings.status).toBe(200);
    const hook = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
      ...admin,
      body: { url: 'https://example.com/hook', events: ['operation.settled'] },
    });
    expect(hook.status).toBe(201);
    const changes = await count('admin_changes');
    // A caller who believes the endpoint takes options must learn it does not, before anything is deleted.
    const dryRun = { dry_run: true };
    for (const [method, path] of [
      ['DELETE', '/v1/admin/connector-settings/http/secrets/crm_token'],
      ['DELETE', '/v1/admin/connector-settings/http'],
      ['DELETE', `/v1/admin/webhooks/${hook.body.id}`],
      ['POST', `/v1/admin/webhooks/${hook.body.id}/enable`],
    ]) {
      const res = await http<FieldProblem>(stack.apiUrl, method, path, { ...admin, body: dryRun });
      expect({ method, path, status: res.status }).toEqual({ method, path, status: 400 });
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(res.body.errors).toEqual([expect.objectContaining({ field: '(body)', rule: 'no_body' })]);
    }
    expect(await count('admin_changes')).toBe(changes);
    const after = await http<{ secrets: string[]; allow_hosts: unknown[] }>(
      stack.apiUrl,
      'GET',
      '/v1/admin/connector-settings/http',
      admin,
    );
    expect(after.body.secrets).toEqual(['crm_token']);
    expect(after.body.allow_hosts).toHaveLength(1);
    expect((await http(stack.apiUrl, 'GET', `/v1/admin/webhooks/${hook.body.id}`, admin)).status).toBe(200);
    // An empty array is a body too (it is no object): refused like any other, on retry as on the rest.
    for (const [method, path] of [
      ['DELETE', `/v1/admin/webhooks/${hook.body.id}`],
      ['POST', `/v1/operations/op_${'0'.repeat(26)}/retry`],
    ]) {
      const res = await http<FieldProblem>(stack.apiUrl, method, path, {
        key: path.includes('retry') ? DEMO.agent : DEMO.admin,
        body: [],
      });
      expect({ path, status: res.status, errors: res.body.errors }).toEqual({
        path,
        status: 400,
        errors: [expect.objectContaining({ rule: 'no_body' })],
      });
    }
    // A body that is not JSON is a body too: the JSON parser leaves it unread, and the DELETE it labels went ahead.
    for (const [method, path, key] of [
      ['DELETE', '/v1/admin/connector-settings/http', DEMO.admin],
      ['DELETE', `/v1/admin/webhooks/${hook.body.id}`, DEMO.admin],
      ['POST', `/v1/operations/op_${'0'.repeat(26)}/retry`, DEMO.agent],
      ['POST', `/v1/operations/op_${'0'.repeat(26)}/recheck`, DEMO.reviewer],
    ]) {
      for (const contentType of ['text/plain', 'application/x-www-form-urlencoded', undefined]) {
        const answer = await rawExchange(
          `${method} ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${key}\r\n` +
            (contentType ? `content-type: ${contentType}\r\n` : '') +
            'content-length: 12\r\nconnection: close\r\n\r\ndry_run=true',
        );
        expect({ method, path, contentType, status: answer.status }).toEqual({
          method,
          path,
          contentType,
          status: 400,
        });
        expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/);
        expect((JSON.parse(answer.body) as FieldProblem).errors).toEqual([
          expect.objectContaining({ field: '(body)', rule: 'no_body' }),
        ]);
      }
    }
    expect(await count('admin_changes')).toBe(changes);
    const kept = await http<{ secrets: string[]; allow_hosts: unknown[] }>(
      stack.apiUrl,
      'GET',
      '/v1/admin/connector-settings/http',
      admin,
    );
    expect(kept.body).toMatchObject({ secrets: ['crm_token'], allow_hosts: [expect.anything()] });
    // No body, or an empty object, is still no body.
    const empty = await http(stack.apiUrl, 'DELETE', `/v1/admin/webhooks/${hook.body.id}`, { ...admin, body: {} });
    expect(empty.status).toBe(204);
    const none = await http(stack.apiUrl, 'DELETE', '/v1/admin/connector-settings/http/secrets/crm_token', admin);
    expect(none.status).toBe(204);
  });

  it('reads an empty chunked body as no body: cancel, recheck, retry and DELETE answer as without one', async () => {
    // A client that streams its body (Transfer-Encoding: chunked) and has nothing to send ends it at once ("0"). The
    // header alone counted as a body: recheck and retry answered 400 no_body, a cancel 415, a DELETE 400 no_body.
    const settings = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { allow_hosts: [{ host: 'example.com', secrets: ['crm_token'] }] },
    });
    expect(settings.status).toBe(200);
    const nobody = `op_${'0'.repeat(26)}`;
    const chunked = (method: string, path: string, key: string, body: string, contentType?: string) =>
      `${method} ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${key}\r\n` +
      (contentType ? `content-type: ${contentType}\r\n` : '') +
      `transfer-encoding: chunked\r\nconnection: close\r\n\r\n${body}`;
    for (const contentType of [undefined, 'text/plain']) {
      const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: submission([charge(unique('chunked'))]),
      });
      expect(created.status).toBe(201);
      const hook = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
        key: DEMO.admin,
        body: { url: 'https://example.com/chunked', events: ['operation.settled'] },
      });
      expect(hook.status).toBe(201);
      const cases: [string, string, string, number][] = [
        ['POST', `/v1/operations/${nobody}/recheck`, DEMO.reviewer, 404],
        ['POST', `/v1/operations/${nobody}/retry`, DEMO.agent, 404],
        ['POST', `/v1/executions/${created.body.id}/cancel`, DEMO.agent, 200],
        ['DELETE', `/v1/admin/webhooks/${hook.body.id}`, DEMO.admin, 204],
      ];
      for (const [method, path, key, status] of cases) {
        const answer = await rawExchange(chunked(method, path, key, '0\r\n\r\n', contentType));
        expect({ method, path, contentType, status: answer.status }).toEqual({ method, path, contentType, status });
      }
      const execution = await http<{ status: string }>(stack.apiUrl, 'GET', `/v1/executions/${created.body.id}`, {
        key: DEMO.agent,
      });
      expect(execution.body.status).toBe('cancelled');
      const gone = await http(stack.apiUrl, 'GET', `/v1/admin/webhooks/${hook.body.id}`, { key: DEMO.admin });
      expect(gone.status).toBe(404);
    }
    // The last chunk coming in a later packet than the headers is read the same.
    const split = new URL(stack.apiUrl);
    const late = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(split.port), split.hostname);
      const chunks: Buffer[] = [];
      socket.on('data', (chunk: Buffer) => chunks.push(chunk));
      socket.on('error', reject);
      socket.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
      socket.write(chunked('POST', `/v1/operations/${nobody}/retry`, DEMO.agent, ''), () =>
        setTimeout(() => socket.write('0\r\n\r\n'), 50),
      );
    });
    expect(late.split(' ')[1]).toBe('404');
    // A chunked body with bytes in it is still a body, labelled or not.
    for (const contentType of [undefined, 'text/plain']) {
      const answer = await rawExchange(
        chunked('POST', `/v1/operations/${nobody}/retry`, DEMO.agent, 'c\r\ndry_run=true\r\n0\r\n\r\n', contentType),
      );
      expect({ contentType, status: answer.status }).toEqual({ contentType, status: 400 });
      expect((JSON.parse(answer.body) as FieldProblem).errors).toEqual([
        expect.objectContaining({ field: '(body)', rule: 'no_body' }),
      ]);
    }
  });

  // Outside /v1 a read's body was ignored: `GET /health/ready` with `{"verbose":true}` answered 200 as if the member had
  // been read, where a body of `true` was a 400; so were the console, /docs, Bull Board and the MCP preflight.
  it.each([
    ['GET', '/', undefined],
    ['GET', '/health/live', undefined],
    ['GET', '/health/ready', undefined],
    ['GET', '/metrics', METRICS_TOKEN],
    ['OPTIONS', '/mcp', undefined],
    ['GET', '/console', undefined],
    ['GET', '/docs', undefined],
    ['GET', '/docs-json', undefined],
    ['GET', '/admin/queues', DEMO.operator],
    ['GET', '/admin/queues/api/queues', DEMO.operator],
  ])('refuses a body on %s %s, which reads none, as /v1 does (400 no_body); none passes', async (method, path, key) => {
    const request = (body: string, type: string) =>
      rawExchange(
        `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n` +
          (key ? `Authorization: Bearer ${key}\r\n` : '') +
          `Content-Type: ${type}\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      );
    for (const [body, type] of [
      ['{"verbose":true}', 'application/json'],
      ['[]', 'application/json'],
      ['verbose', 'text/plain'],
    ]) {
      const answer = await request(body, type);
      expect({ body, status: answer.status }).toEqual({ body, status: 400 });
      expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(JSON.parse(answer.body)).toMatchObject({
        status: 400,
        errors: [{ field: '(body)', rule: 'no_body', message: `${method} ${path} takes no body` }],
      });
    }
    // No body, or an empty JSON object, is none.
    for (const body of ['', '{}']) expect((await request(body, 'application/json')).status).toBeLessThan(300);
  });

  it('refuses query parameters on the OpenAPI document, which takes none (400 unknown_field); serves it without', async () => {
    // `?version=2025-01` or `?format=yaml` was answered 200 with the current JSON document, as if it had been read.
    for (const path of ['/docs-json?version=2025-01', '/docs-json?format=yaml', '/docs-yaml?x=1']) {
      const res = await http<FieldProblem>(stack.apiUrl, 'GET', path);
      expect({ path, status: res.status }).toEqual({ path, status: 400 });
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(res.body.errors).toEqual([expect.objectContaining({ rule: 'unknown_field' })]);
    }
    const doc = await http<{ openapi: string }>(stack.apiUrl, 'GET', '/docs-json');
    expect(doc.status).toBe(200);
    expect(doc.body.openapi).toMatch(/^3\./);
    expect((await http(stack.apiUrl, 'GET', '/docs-yaml')).status).toBe(200);
  });

  it('refuses query parameters on the probes and /metrics, which take none, as /v1 refuses them (400 unknown_field)', async () => {
    for (const [path, key] of [
      ['/health/live?verbose=1', undefined],
      ['/health/ready?verbose=', undefined],
      ['/metrics?name[]=verity_executions_in_flight', METRICS_TOKEN],
    ] as const) {
      const res = await http<FieldProblem>(stack.apiUrl, 'GET', path, key ? { key } : {});
      expect({ path, status: res.status }).toEqual({ path, status: 400 });
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(res.body.errors).toEqual([expect.objectContaining({ rule: 'unknown_field' })]);
    }
    // /metrics checks the scraper first: without a token the answer is 401 whatever the query, as without one.
    expect((await http(stack.apiUrl, 'GET', '/metrics?x=1')).status).toBe(401);
    expect((await http(stack.apiUrl, 'GET', '/metrics', { key: METRICS_TOKEN })).status).toBe(200);
    expect((await http(stack.apiUrl, 'GET', '/health/ready')).status).toBe(200);
  });

  // The query string was parsed with Node's default limit of 1,000 `&`-separated pieces, and every piece past it was
  // dropped without a word: after 1,000 empty ones, `dry_run=true` was not refused and the DELETE cleared the
  // connector's settings, `status=bogus` listed everything and `limit=1` listed 50.
  it('reads every query parameter however many `&` come before it: none is dropped unread, nothing is written', async () => {
    const admin = { key: DEMO.admin };
    const padding = '&'.repeat(1_000);
    const set = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/sandbox.sms', {
      ...admin,
      body: { spending_caps: [{ period: 'day', max_operations: 7 }] },
    });
    expect(set.status).toBe(200);
    const changes = await count('admin_changes');
    const deleted = await http<FieldProblem>(
      stack.apiUrl,
      'DELETE',
      `/v1/admin/connector-settings/sandbox.sms?${padding}dry_run=true`,
      admin,
    );
    expect(deleted.status).toBe(400);
    expect(deleted.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(deleted.body.errors).toEqual([expect.objectContaining({ field: 'dry_run', rule: 'unknown_field' })]);
    expect(await count('admin_changes')).toBe(changes);
    const kept = await http<{ spending_caps: unknown[] }>(
      stack.apiUrl,
      'GET',
      '/v1/admin/connector-settings/sandbox.sms',
      admin,
    );
    expect(kept.body.spending_caps).toEqual([{ period: 'day', max_operations: 7 }]);

    const filtered = await http<FieldProblem>(stack.apiUrl, 'GET', `/v1/executions?${padding}status=bogus`, {
      key: DEMO.agent,
    });
    expect(filtered.status).toBe(400);
    expect(filtered.body.errors).toEqual([expect.objectContaining({ field: 'status', rule: 'invalid_value' })]);
    for (const i of [1, 2]) {
      const created = await http(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: submission([charge(unique(`pad${i}`))]),
      });
      expect(created.status).toBe(201);
    }
    const page = await http<{ data: unknown[] }>(stack.apiUrl, 'GET', `/v1/executions?${padding}limit=1`, {
      key: DEMO.agent,
    });
    expect(page.status).toBe(200);
    expect(page.body.data).toHaveLength(1);
  });

  // Node keeps the first 2,000 headers of a request and drops the rest without a word (maxHeadersCount); 2,000 empty
  // ones fit in 8 KiB, under the 16 KiB limit. An If-Match after them was never seen, and a PUT made against a stale
  // version wrote over the newer one; an Idempotency-Key after them made a retry a second execution.
  it('reads every header however many come before it: If-Match and Idempotency-Key are never dropped unread', async () => {
    const padding = 'x:\r\n'.repeat(2_000);
    const request = (method: string, path: string, key: string, headers: string, body: string) =>
      rawExchange(
        `${method} ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${key}\r\n` +
          `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n` +
          `${padding}${headers}\r\n${body}`,
      );
    const policy = await http(stack.apiUrl, 'GET', '/v1/admin/policy', { key: DEMO.admin });
    const changes = await count('admin_changes');
    const stale = await request(
      'PUT',
      '/v1/admin/policy',
      DEMO.admin,
      'if-match: "a-version-long-gone"\r\n',
      JSON.stringify({ obligation_owner: 'padded-owner' }),
    );
    expect(stale.status).toBe(412);
    expect(JSON.parse(stale.body)).toMatchObject({ type: 'https://verity.dev/problems/precondition-failed' });
    expect(await count('admin_changes')).toBe(changes);
    expect((await http(stack.apiUrl, 'GET', '/v1/admin/policy', { key: DEMO.admin })).body).toEqual(policy.body);

    const executions = await count('executions');
    const body = JSON.stringify(submission([charge(unique('padkey'))]));
    const idempotencyKey = `idempotency-key: ${unique('padded')}\r\n`;
    const first = await request('POST', '/v1/executions', DEMO.agent, idempotencyKey, body);
    const retry = await request('POST', '/v1/executions', DEMO.agent, idempotencyKey, body);
    expect([first.status, retry.status]).toEqual([201, 201]);
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect((JSON.parse(retry.body) as { id: string }).id).toBe((JSON.parse(first.body) as { id: string }).id);
    expect(await count('executions')).toBe(executions + 1);
  });

  it('refuses a PUT that says its body is a part of one (Content-Range): 400 naming it, nothing written', async () => {
    // RFC 9110 14.5: a PUT replaces the whole representation, so a server that allows PUT must answer 400 to one with
    // Content-Range (its body is likely a part mistakenly sent as the whole). Taken as the whole, a part that parses
    // (the first of an uploader's pieces) replaced the settings with itself.
    const policy = await http(stack.apiUrl, 'GET', '/v1/admin/policy', { key: DEMO.admin });
    const settings = await http(stack.apiUrl, 'GET', '/v1/admin/connector-settings/sandbox.sms', { key: DEMO.admin });
    const changes = await count('admin_changes');
    const parts: [string, unknown][] = [
      ['/v1/admin/policy', { obligation_owner: 'first-part' }],
      ['/v1/admin/connector-settings/sandbox.sms', { spending_caps: [{ period: 'day', max_operations: 1 }] }],
    ];
    for (const [path, body] of parts) {
      for (const range of ['bytes 0-29/120', 'bytes 0-29/*']) {
        const res = await http<Problem>(stack.apiUrl, 'PUT', path, {
          key: DEMO.admin,
          body,
          headers: { 'content-range': range },
        });
        expect([path, range, res.status, res.headers.get('content-type')?.split(';')[0]]).toEqual([
          path,
          range,
          400,
          'application/problem+json',
        ]);
        expect(res.body.detail).toMatch(/Content-Range/);
      }
    }
    expect(await count('admin_changes')).toBe(changes);
    expect((await http(stack.apiUrl, 'GET', '/v1/admin/policy', { key: DEMO.admin })).body).toEqual(policy.body);
    const after = await http(stack.apiUrl, 'GET', '/v1/admin/connector-settings/sandbox.sms', { key: DEMO.admin });
    expect(after.headers.get('etag')).toBe(settings.headers.get('etag'));
  });

  it('refuses a Content-Range PUT before the key is checked, as a body that is no JSON; without either it is 401', async () => {
    // Input no route may receive is refused by the request-wide checks in front of every route, before the key is
    // looked up (no database read, no failed-authentication count): the same answer for every caller, saying nothing
    // of any tenant. A partial PUT is one of them, as a body the JSON parser refuses is.
    const policy = await http(stack.apiUrl, 'GET', '/v1/admin/policy', { key: DEMO.admin });
    const part = await http<Problem>(stack.apiUrl, 'PUT', '/v1/admin/policy', {
      body: { obligation_owner: 'first-part' },
      headers: { 'content-range': 'bytes 0-29/120' },
    });
    const notJson = await http<Problem>(stack.apiUrl, 'PUT', '/v1/admin/policy', {
      rawBody: '{"obligation_owner":',
      headers: { 'content-type': 'application/json' },
    });
    const whole = await http<Problem>(stack.apiUrl, 'PUT', '/v1/admin/policy', { body: { obligation_owner: 'x' } });
    expect([part.status, notJson.status, whole.status]).toEqual([400, 400, 401]);
    expect(part.body.detail).toMatch(/Content-Range/);
    expect((await http(stack.apiUrl, 'GET', '/v1/admin/policy', { key: DEMO.admin })).body).toEqual(policy.body);
  });

  it('takes a body whose Content-Encoding is empty as sent without one, as the JSON parser does', async () => {
    // Content-Encoding is a list (RFC 9110 8.4, 5.6.1): an empty one names no coding, and the JSON parser reads the
    // body as it is. Only a coding besides gzip, deflate and br is refused: an empty value is none of them.
    const executions = await count('executions');
    const created = await http(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('empty-coding'))]),
      headers: { 'content-encoding': '' },
    });
    expect(created.status).toBe(201);
    expect(await count('executions')).toBe(executions + 1);
  });

  it('does not carry out a write whose If-Match can never match (the resource has no ETag): 412, nothing written', async () => {
    // RFC 9110 13.1.1: an If-Match naming entity tags is true only if one is the resource's current one. Executions,
    // operations and webhook endpoints have none: a client that made its cancel conditional on a version it believed
    // it had saw it carried out whatever had happened since.
    const created = await http<{ id: string; status: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('ifmatch'), { requires_approval: true })]),
    });
    expect(created.status).toBe(201);
    const before = await count('executions');
    const stale = { 'if-match': '"a-version-never-given"' };
    const cancel = await http<Problem>(stack.apiUrl, 'POST', `/v1/executions/${created.body.id}/cancel`, {
      key: DEMO.agent,
      body: {},
      headers: stale,
    });
    expect(cancel.status).toBe(412);
    expect(cancel.body).toMatchObject({ type: 'https://verity.dev/problems/precondition-failed', status: 412 });
    // As the OpenAPI document shows it (its example names an example id).
    const doc = (await (await fetch(`${stack.apiUrl}/docs-json`)).json()) as {
      paths: Record<string, { post: { responses: Record<string, { content: Record<string, { examples: object }> }> } }>;
    };
    const examples = doc.paths['/v1/executions/{id}/cancel'].post.responses['412'].content['application/problem+json']
      .examples as Record<string, { value: { detail: string; instance: string } }>;
    const shown = examples['if-match-without-etag'].value;
    expect(cancel.body.detail).toBe(shown.detail.replace(shown.instance, `/v1/executions/${created.body.id}/cancel`));
    const submitted = await http<Problem>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('ifmatch'))]),
      headers: stale,
    });
    expect(submitted.status).toBe(412);
    expect(await count('executions')).toBe(before);
    const read = await http<{ status: string }>(stack.apiUrl, 'GET', `/v1/executions/${created.body.id}`, {
      key: DEMO.agent,
    });
    expect(read.body.status).toBe(created.body.status);
    // `*` asks only that the resource exist: it does.
    const any = await http<{ status: string }>(stack.apiUrl, 'POST', `/v1/executions/${created.body.id}/cancel`, {
      key: DEMO.agent,
      body: {},
      headers: { 'if-match': '*' },
    });
    expect(any.status).toBe(200);
    expect(any.body.status).toBe('cancelled');
  });

  it('refuses a dependency named twice, as keys and criterion keys are (400 unique), writing nothing', async () => {
    const before = await count('executions');
    const first = charge(unique('dep'));
    const second = { ...charge(unique('dep')), key: 'second', depends_on: ['charge', 'charge'] };
    const res = await http<FieldProblem>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([first, second]),
    });
    expect(res.status).toBe(400);
    expect(res.body.errors).toEqual([
      expect.objectContaining({ field: 'operations[1].depends_on[1]', rule: 'unique' }),
    ]);
    expect(await count('executions')).toBe(before);
  });

  it('answers a method a route does not have with 405 and Allow, not 404: the execution exists (RFC 9110 15.5.6)', async () => {
    const created = await http<{ id: string; status: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('verb'))]),
    });
    expect(created.status).toBe(201);
    const id = created.body.id;
    const before = await count('events');
    // An agent that "deletes" its execution to cancel it was told it does not exist (404 not-found), the answer a key
    // gets for an id that was never created — and the SDK raised VerityNotFoundError for an execution that is running.
    for (const [method, path, allow] of [
      ['DELETE', `/v1/executions/${id}`, 'GET, HEAD'],
      ['PATCH', `/v1/executions/${id}`, 'GET, HEAD'],
      ['PUT', '/v1/executions', 'GET, HEAD, POST'],
      ['GET', `/v1/executions/${id}/cancel`, 'POST'],
      ['DELETE', '/v1/admin/policy', 'GET, HEAD, PUT'],
      ['POST', '/health/live', 'GET, HEAD'],
      // The pages served beside the controllers (console, OpenAPI) exist too: a POST there is no "no such page".
      ['POST', '/console', 'GET, HEAD'],
      ['PUT', '/docs', 'GET, HEAD'],
      ['DELETE', '/docs-json', 'GET, HEAD'],
      // And what is served under them: the console's own URL (with its slash), its pages, script and icon; the
      // document's page and Swagger UI's files.
      ['POST', '/console/', 'GET, HEAD'],
      ['DELETE', `/console/executions/${id}`, 'GET, HEAD'],
      ['PUT', '/console/app.js', 'GET, HEAD'],
      ['POST', '/console/favicon.svg', 'GET, HEAD'],
      ['POST', '/docs/', 'GET, HEAD'],
      ['PUT', '/docs/swagger-ui-init.js', 'GET, HEAD'],
      ['DELETE', '/docs/swagger-ui.css', 'GET, HEAD'],
    ] as const) {
      for (const key of [DEMO.agent, undefined]) {
        const res = await http<Problem>(stack.apiUrl, method, path, key ? { key } : {});
        expect({ method, path, key, status: res.status, allow: res.headers.get('allow') }).toEqual({
          method,
          path,
          key,
          status: 405,
          allow,
        });
        expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
        expect(res.body).toMatchObject({ type: 'https://verity.dev/problems/method-not-allowed', status: 405 });
      }
    }
    // Nothing was done: the execution is as it was, and not one event was written.
    const after = await http<{ id: string }>(stack.apiUrl, 'GET', `/v1/executions/${id}`, { key: DEMO.agent });
    expect(after.status).toBe(200);
    expect(await count('events')).toBe(before);
    // A path no route has stays 404; /mcp keeps its own 405, naming what it takes as any other path does.
    expect((await http(stack.apiUrl, 'DELETE', `/v1/executions/${id}/nothing`, { key: DEMO.agent })).status).toBe(404);
    expect((await http(stack.apiUrl, 'DELETE', '/v1/executions/')).status).toBe(404);
    // Nor does a page the console or the document does not have become one by another method.
    for (const path of ['/console/nothing.js', '/console/operations/', '/docs/nothing.css', '/docs/x/swagger-ui.css']) {
      expect([path, (await http(stack.apiUrl, 'POST', path)).status]).toEqual([path, 404]);
      expect([
        path,
        (await http(stack.apiUrl, 'GET', path, { headers: { accept: 'application/json' } })).status,
      ]).toEqual([path, 404]);
    }
    const mcp = await http(stack.apiUrl, 'GET', '/mcp', { key: DEMO.agent });
    expect([mcp.status, mcp.headers.get('allow')]).toEqual([405, 'OPTIONS, POST']);
    // Another method there names what /mcp takes, not the methods it has handlers for only to refuse them.
    const other = await http(stack.apiUrl, 'PROPFIND', '/mcp');
    expect([other.status, other.headers.get('allow')]).toEqual([405, 'OPTIONS, POST']);
  });

  it('names the webhook endpoint a 201 created in Location, as the executions and retries it creates are named', async () => {
    const allowed = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { allow_hosts: [{ host: '127.0.0.1', allow_private: true }] },
    });
    expect(allowed.status).toBe(200);
    const created = await http<{ id: string; secret: string }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
      key: DEMO.admin,
      body: { url: 'http://127.0.0.1:9/hooks', events: ['execution.finished'] },
    });
    expect(created.status).toBe(201);
    // Without Location a 201's new resource is the target URI (RFC 9110, 15.3.2): here the list, not the endpoint.
    expect(created.headers.get('location')).toBe(`/v1/admin/webhooks/${created.body.id}`);
    const named = await http<{ id: string }>(stack.apiUrl, 'GET', created.headers.get('location')!, {
      key: DEMO.admin,
    });
    expect([named.status, named.body.id]).toEqual([200, created.body.id]);
  });

  it('reads If-Match sent on several lines as one list: the current ETag on any line writes once, none of them 412', async () => {
    const put = (lines: string[], owner: string) => {
      const body = JSON.stringify({ obligation_owner: owner });
      return rawExchange(
        `PUT /v1/admin/policy HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${DEMO.admin}\r\n` +
          `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n` +
          `${lines.map((line) => `if-match: ${line}\r\n`).join('')}\r\n${body}`,
      );
    };
    const before = await http<{ obligation_owner: string }>(stack.apiUrl, 'GET', '/v1/admin/policy', {
      key: DEMO.admin,
    });
    const changes = await count('admin_changes');
    const stale = await put(Array<string>(50).fill('"a-version-long-gone"'), 'fifty-stale-lines');
    expect(stale.status).toBe(412);
    expect(JSON.parse(stale.body)).toMatchObject({ type: 'https://verity.dev/problems/precondition-failed' });
    expect(await count('admin_changes')).toBe(changes);

    const current = await put(['"a-version-long-gone"', before.headers.get('etag')!], 'current-on-a-second-line');
    expect(current.status).toBe(200);
    expect(await count('admin_changes')).toBe(changes + 1);
    const after = await http<{ obligation_owner: string }>(stack.apiUrl, 'GET', '/v1/admin/policy', {
      key: DEMO.admin,
    });
    expect(after.body.obligation_owner).toBe('current-on-a-second-line');
  });

  // RFC 9110, section 5.6.1.2: a recipient ignores empty elements of a list (`"v1", , "v2"`, a trailing comma). They
  // were a 400 `invalid_format`, as if the list named no version.
  it.each([
    ['a trailing comma', (etag: string) => `${etag},`],
    ['a leading empty element', (etag: string) => ` , ${etag}`],
    ['an empty element between two tags', (etag: string) => `"a-version-long-gone", ,${etag}`],
  ])('reads If-Match with %s as the list without it: the current ETag writes', async (_what, spell) => {
    const before = await http(stack.apiUrl, 'GET', '/v1/admin/policy', { key: DEMO.admin });
    const owner = unique('empty-element');
    const written = await http<{ obligation_owner: string }>(stack.apiUrl, 'PUT', '/v1/admin/policy', {
      key: DEMO.admin,
      body: { obligation_owner: owner },
      headers: { 'if-match': spell(before.headers.get('etag')!) },
    });
    expect(written.status).toBe(200);
    expect(written.body.obligation_owner).toBe(owner);
    // Only empty elements name no version at all: still a 400, nothing written.
    const changes = await count('admin_changes');
    const none = await http<FieldProblem>(stack.apiUrl, 'PUT', '/v1/admin/policy', {
      key: DEMO.admin,
      body: { obligation_owner: 'no-version-named' },
      headers: { 'if-match': ' , ,' },
    });
    expect(none.status).toBe(400);
    expect(none.body.errors).toEqual([expect.objectContaining({ field: 'If-Match', rule: 'invalid_format' })]);
    expect(await count('admin_changes')).toBe(changes);
  });

  it('answers Expect: 100-continue with no body as a request without one: 100, then 400 naming the body', async () => {
    const before = await count('executions');
    const answer = await rawExchange(
      `POST /v1/executions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${DEMO.agent}\r\n` +
        'content-type: application/json\r\nexpect: 100-continue\r\ncontent-length: 0\r\nconnection: close\r\n\r\n',
    );
    const statuses = [...answer.raw.matchAll(/^HTTP\/1\.1 (\d{3})/gm)].map((m) => Number(m[1]));
    expect(statuses).toEqual([100, 400]);
    const problem = JSON.parse(answer.raw.slice(answer.raw.lastIndexOf('\r\n\r\n') + 4)) as FieldProblem;
    expect(problem.type).toBe('https://verity.dev/problems/validation-error');
    expect(problem.errors.length).toBeGreaterThan(0);
    expect(await count('executions')).toBe(before);
  });

  it.each(['charset=', 'charset=""', 'charset=utf-8\u00ff'])(
    'refuses Content-Type application/json; %s as a charset that is not UTF-8: 415, nothing written',
    async (parameter) => {
      const before = await count('executions');
      const body = JSON.stringify(submission([charge(unique('charset'))]));
      // As latin-1 bytes: the last value's ÿ is the one byte 0xFF, as a client that writes latin-1 headers sends it.
      const answer = await rawExchangeWith(
        stack.apiUrl,
        Buffer.from(
          `POST /v1/executions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${DEMO.agent}\r\n` +
            `content-type: application/json; ${parameter}\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
            `connection: close\r\n\r\n${body}`,
          'latin1',
        ),
        { halfClose: false },
      );
      expect(answer.status).toBe(415);
      expect(JSON.parse(answer.body)).toMatchObject({ type: 'https://verity.dev/problems/unsupported-media-type' });
      expect(await count('executions')).toBe(before);
    },
  );
});
