import { request } from 'node:http';
import { DEMO, METRICS_TOKEN, Stack } from '../support/stack';
import { charge, http, rawExchange, submission, unique } from '../support/http';

/**
 * Every answer of the API says `X-Content-Type-Options: nosniff`, whatever produced it: a route's JSON, a refusal's
 * problem+json (from a guard, a schema, the body parser, the router's 404, or Node's HTTP parser on a raw socket), the
 * event stream, /metrics, /health and the pages (console, /docs). A browser that sniffs a JSON answer holding a
 * caller's text (an agent id, an intent, a URL) may run it as HTML or script.
 */
describe('X-Content-Type-Options: nosniff on every answer of the API', () => {
  let stack: Stack;
  let executionId = '';

  beforeAll(async () => {
    stack = await Stack.start({ label: 'nosniff', dispatchers: 0, reconcilers: 0 });
    const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('nosniff'))]),
    });
    expect(created.status).toBe(201);
    executionId = created.body.id;
  }, 60_000);
  afterAll(async () => stack?.stop());

  it('on JSON, problem+json (4xx of every origin, the 404 of no route), /metrics, /health and the pages', async () => {
    const answers: [string, number, { status: number; headers: Headers }][] = [
      ['JSON', 200, await http(stack.apiUrl, 'GET', '/v1/executions', { key: DEMO.agent })],
      [
        'created',
        201,
        await http(stack.apiUrl, 'POST', '/v1/executions', {
          key: DEMO.agent,
          body: submission([charge(unique('nosniff'))]),
        }),
      ],
      ['the root', 200, await http(stack.apiUrl, 'GET', '/')],
      ['no key', 401, await http(stack.apiUrl, 'GET', '/v1/executions')],
      ['no such execution', 404, await http(stack.apiUrl, 'GET', '/v1/executions/exe_nothere', { key: DEMO.agent })],
      ['no such route', 404, await http(stack.apiUrl, 'GET', '/v1/nothing/here', { key: DEMO.agent })],
      ['no route at all', 404, await http(stack.apiUrl, 'GET', '/nothing')],
      ['a schema refusal', 400, await http(stack.apiUrl, 'POST', '/v1/executions', { key: DEMO.agent, body: {} })],
      [
        'the body parser',
        400,
        await http(stack.apiUrl, 'POST', '/v1/executions', {
          key: DEMO.agent,
          rawBody: '{"agent_id":',
          headers: { 'content-type': 'application/json' },
        }),
      ],
      [
        'a media type',
        415,
        await http(stack.apiUrl, 'POST', '/v1/executions', {
          key: DEMO.agent,
          rawBody: 'x',
          headers: { 'content-type': 'text/plain' },
        }),
      ],
      ['a method', 405, await http(stack.apiUrl, 'DELETE', '/v1/executions', { key: DEMO.agent })],
      ['metrics', 200, await http(stack.apiUrl, 'GET', '/metrics', { key: METRICS_TOKEN })],
      ['liveness', 200, await http(stack.apiUrl, 'GET', '/health/live')],
      ['the console', 200, await http(stack.apiUrl, 'GET', '/console')],
      ['the console script', 200, await http(stack.apiUrl, 'GET', '/console/app.js')],
      ['Swagger UI', 200, await http(stack.apiUrl, 'GET', '/docs')],
      ['the document', 200, await http(stack.apiUrl, 'GET', '/docs-json')],
    ];
    const seen = answers.map(([what, , res]) => ({
      what,
      status: res.status,
      nosniff: res.headers.get('x-content-type-options'),
    }));
    expect(seen).toEqual(answers.map(([what, status]) => ({ what, status, nosniff: 'nosniff' })));
  });

  it('on the event stream, before its first event', async () => {
    const headers = await new Promise<Record<string, unknown>>((resolve, reject) => {
      const url = new URL(`${stack.apiUrl}/v1/executions/${executionId}/stream`);
      const req = request(url, { headers: { authorization: `Bearer ${DEMO.agent}` } }, (res) => {
        resolve({
          status: res.statusCode,
          type: res.headers['content-type'],
          nosniff: res.headers['x-content-type-options'],
        });
        res.destroy();
      });
      req.on('error', reject);
      req.end();
    });
    expect(headers).toEqual({ status: 200, type: expect.stringMatching(/^text\/event-stream/), nosniff: 'nosniff' });
  });

  it('on the answers written before express (a request the HTTP parser refuses, an unmet Expect)', async () => {
    const malformed = await rawExchange(stack.apiUrl, 'GET /v1/executions HTTP/1.1\r\nHost: x\r\nBad\u0001: y\r\n\r\n');
    expect([malformed.status, malformed.headers['content-type'], malformed.headers['x-content-type-options']]).toEqual([
      400,
      'application/problem+json; charset=utf-8',
      'nosniff',
    ]);
    const expectation = await rawExchange(
      stack.apiUrl,
      'POST /v1/executions HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Length: 0\r\nConnection: close\r\n\r\n',
    );
    expect([expectation.status, expectation.headers['x-content-type-options']]).toEqual([417, 'nosniff']);
    const noHost = await rawExchange(stack.apiUrl, 'GET /v1/executions HTTP/1.1\r\nConnection: close\r\n\r\n');
    expect([noHost.status, noHost.headers['x-content-type-options']]).toEqual([400, 'nosniff']);
  });
});
