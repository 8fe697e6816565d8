import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { createApiKey } from '@verity/persistence/api-keys';
import { DEMO, Stack } from '../support/stack';
import { http, rawExchange, sms, submission, unique } from '../support/http';

/**
 * /mcp judged as a hostile or careless client would meet it, against the MCP Streamable HTTP transport: the Origin of a
 * browser page (DNS rebinding), and what reaches the tools.
 */
const ALLOWED = 'https://agent.example.com';
const HEADERS = {
  accept: 'application/json, text/event-stream',
  'content-type': 'application/json',
  'mcp-protocol-version': '2025-06-18',
};

let stack: Stack;

beforeAll(async () => {
  stack = await Stack.start({
    label: 'mcp-transport',
    dispatchers: 0,
    reconcilers: 0,
    env: { MCP_ALLOWED_ORIGINS: `${ALLOWED}, http://localhost:5173` },
  });
}, 120_000);

afterAll(async () => {
  await stack?.stop();
});

function post(body: unknown, headers: Record<string, string> = {}, key: string | undefined = DEMO.agent) {
  return http(stack.apiUrl, 'POST', '/mcp', {
    key,
    rawBody: JSON.stringify(body),
    headers: { ...HEADERS, ...headers },
  });
}

const listTools = { jsonrpc: '2.0', id: 1, method: 'tools/list' };

function toolCall(name: string, args: Record<string, unknown>, id = 7) {
  return { jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } };
}

/** The JSON-RPC message of an answer sent as an SSE stream (`event: message` / `data: …`) or as JSON. */
function message(text: string): { id?: unknown; result?: Record<string, unknown>; error?: { code: number } } {
  const data = text
    .split('\n')
    .filter((line) => line.startsWith('data: '))
    .map((line) => line.slice('data: '.length));
  return JSON.parse(data.length > 0 ? data[data.length - 1] : text);
}

async function executionCount(): Promise<number> {
  const [row] = (await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM executions`)) as { n: number }[];
  return row.n;
}

describe('MCP: the Origin of a browser page (DNS rebinding)', () => {
  it.each([
    ['another site', 'http://attacker.example'],
    ['an opaque origin (sandboxed frame, file: page)', 'null'],
    ['text that is no origin', 'not an origin'],
    ['an allowed origin on another port', 'https://agent.example.com:8443'],
    ['an allowed origin over the other scheme', 'http://agent.example.com'],
  ])('refuses %s with 403 problem+json, before the key is looked up, and writes nothing', async (_what, origin) => {
    const before = await executionCount();
    const submit = toolCall('submit_execution', submission([sms(unique('origin'))]));
    for (const key of [DEMO.agent, undefined, 'not-a-key']) {
      const res = await post(submit, { origin }, key);
      expect(res.status).toBe(403);
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(res.body).toMatchObject({
        type: 'https://verity.dev/problems/forbidden',
        status: 403,
        instance: '/mcp',
        detail: expect.stringContaining('MCP_ALLOWED_ORIGINS'),
      });
    }
    expect(await executionCount()).toBe(before);
  });

  it('refuses another origin 403 before its body is read: a body that would be refused too changes nothing', async () => {
    for (const rawBody of ['{"jsonrpc": ', `{"padding":"${'x'.repeat(300 * 1024)}"}`]) {
      const res = await http(stack.apiUrl, 'POST', '/mcp', {
        key: DEMO.agent,
        rawBody,
        headers: { ...HEADERS, origin: 'http://attacker.example' },
      });
      expect(res.status).toBe(403);
      expect(res.headers.get('access-control-allow-origin')).toBeNull();
    }
  });

  it('names an allowed page’s origin on a refusal of its body too (no JSON, too large), so the page can read it', async () => {
    for (const [rawBody, status] of [
      ['{"jsonrpc": ', 400],
      [`{"padding":"${'x'.repeat(300 * 1024)}"}`, 413],
    ] as const) {
      const res = await http(stack.apiUrl, 'POST', '/mcp', {
        key: DEMO.agent,
        rawBody,
        headers: { ...HEADERS, origin: ALLOWED },
      });
      expect(res.status).toBe(status);
      expect(res.headers.get('access-control-allow-origin')).toBe(ALLOWED);
      expect(res.headers.get('vary')).toMatch(/origin/i);
      expect(res.body).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: expect.any(Number) } });
    }
  });

  it('refuses the attacker’s host however it reaches the API: the Host header does not make it the API’s own', async () => {
    const port = new URL(stack.apiUrl).port;
    // Written by hand: fetch sends the URL's own host whatever Host it is given, so the rebinding page's Host never
    // reached the API. A key of its own, not a published one (those are refused under any other host name anyway).
    const { key } = await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo', role: 'agent', label: 'own' });
    const body = JSON.stringify(listTools);
    const res = await rawExchange(
      stack.apiUrl,
      `POST /mcp HTTP/1.1\r\nHost: rebound.example:${port}\r\nOrigin: http://rebound.example:${port}\r\n` +
        `Authorization: Bearer ${key}\r\nContent-Type: application/json\r\n` +
        `Accept: application/json, text/event-stream\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
        `Connection: close\r\n\r\n${body}`,
    );
    expect(res.status).toBe(403);
  });

  it.each([
    ['no Origin (a client that is no browser)', undefined],
    ['a configured origin', ALLOWED],
    ['another configured origin', 'http://localhost:5173'],
    ['the API’s own origin', 'SELF'],
    ['the API’s own port under the loopback name', 'LOCALHOST'],
  ])('answers %s', async (_what, origin) => {
    const port = new URL(stack.apiUrl).port;
    const value =
      origin === 'SELF' ? stack.apiUrl : origin === 'LOCALHOST' ? `http://localhost:${port}` : (origin ?? undefined);
    const res = await post(listTools, value === undefined ? {} : { origin: value });
    expect(res.status).toBe(200);
    const tools = (message(res.text).result?.tools ?? []) as { name: string }[];
    expect(tools.map((t) => t.name)).toContain('submit_execution');
  });
});

describe('MCP: messages that are not what they should be', () => {
  it('answers an empty batch 400 with the JSON-RPC error -32600 (Invalid Request), not 202 as if it were accepted', async () => {
    const res = await post([]);
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.body).toEqual({
      jsonrpc: '2.0',
      id: null,
      error: { code: -32600, message: expect.stringContaining('empty batch') },
    });
  });

  // With the request's id where it can be read (a string or an integer), as the stdio entry point answers the same
  // line: JSON-RPC's id is null only when it could not be determined.
  it.each([
    ['an empty object', {}, 'the body is no JSON-RPC', null],
    ['no method, id or result', { jsonrpc: '2.0' }, 'the body is no JSON-RPC', null],
    ['JSON-RPC 1.0', { jsonrpc: '1.0', id: 1, method: 'tools/list' }, 'the body is no JSON-RPC', 1],
    [
      'a progress token that is an object',
      { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'x', _meta: { progressToken: {} } } },
      'the body is no JSON-RPC',
      1,
    ],
    [
      'params null, a string id',
      { jsonrpc: '2.0', id: 'call-9', method: 'tools/list', params: null },
      'no JSON-RPC',
      'call-9',
    ],
    ['an id that is an object', { jsonrpc: '2.0', id: {}, method: 'tools/list' }, 'the body is no JSON-RPC', null],
    ['a fractional id', { jsonrpc: '2.0', id: 1.5, method: 'tools/list' }, 'the body is no JSON-RPC', null],
    [
      'a batch with a number in it',
      [{ jsonrpc: '2.0', id: 1, method: 'tools/list' }, 7],
      'message 1 of the batch',
      null,
    ],
  ])(
    'answers JSON that is no JSON-RPC message (%s) 400 with -32600 (Invalid Request), not -32700 (Parse error)',
    async (_what, body, says, id) => {
      const res = await post(body);
      expect(res.status).toBe(400);
      expect(res.body).toEqual({
        jsonrpc: '2.0',
        id,
        error: { code: -32600, message: expect.stringContaining(says) },
      });
    },
  );

  it('refuses a batch whose requests share an id with -32600 (Invalid Request), and carries out none of them', async () => {
    // Each request's answer is matched to it by its id: of two with one id, one answer was sent and the other dropped,
    // so a second submission was carried out (an execution created) and never reported to the agent.
    const before = await executionCount();
    const res = await post([
      toolCall('submit_execution', submission([sms(unique('dup-id-a'))]), 5),
      toolCall('submit_execution', submission([sms(unique('dup-id-b'))]), 5),
    ]);
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.body).toEqual({
      jsonrpc: '2.0',
      id: null,
      error: { code: -32600, message: expect.stringContaining('id 5') },
    });
    // The refusal is made before anything runs: the HTTP answer came back, so nothing is still on its way.
    expect(await executionCount()).toBe(before);
  });

  const submitText = () => JSON.stringify(toolCall('submit_execution', submission([sms(unique('refused-body'))])));
  it.each([
    [
      'text that is no JSON',
      () => '{"jsonrpc": "2.0", "id": 1,',
      {},
      400,
      -32700,
      'Parse error: the body is not valid JSON',
      'json',
      null,
    ],
    // No JSON at all is no JSON text either (JSON-RPC: -32700), not a message that fails to be one (-32600).
    ['an empty body', () => '', {}, 400, -32700, 'Parse error: the body is empty', 'json', null],
    // Valid JSON refused for a member: Invalid Request (not a Parse error), with the request's id where it can be
    // read — not when the id itself is what was given twice (which one counts would be a guess).
    [
      'an id given twice',
      () => submitText().replace('{"jsonrpc":"2.0"', '{"jsonrpc":"2.0","id":8'),
      {},
      400,
      -32600,
      'Invalid Request: id: given twice',
      'duplicate_key',
      null,
    ],
    [
      'a member given twice',
      () => submitText().replace('"tools/call"', '"tools/call","note":1,"note":2'),
      {},
      400,
      -32600,
      'Invalid Request: note: given twice',
      'duplicate_key',
      7,
    ],
    [
      'a number a double would round',
      () => submitText().replace('"tools/call"', '"tools/call","note":12345678901234567890'),
      {},
      400,
      -32600,
      'Invalid Request: note',
      'exact_number',
      7,
    ],
    [
      'a __proto__ member in the params',
      () => submitText().replace('"params":{', '"params":{"__proto__":{"x":1},'),
      {},
      400,
      -32600,
      'Invalid Request: params.__proto__',
      'unknown_field',
      7,
    ],
    [
      'a string with a NUL character',
      () => submitText().replace('"tools/call"', '"tools/call","note":"a\\u0000b"'),
      {},
      400,
      -32600,
      'Invalid Request: note',
      'no_control_characters',
      7,
    ],
    [
      'an id with a NUL character',
      () => submitText().replace('"id":7', '"id":"a\\u0000b"'),
      {},
      400,
      -32600,
      'Invalid Request: id',
      'no_control_characters',
      null,
    ],
    [
      'a body over 256 KiB',
      () => submitText().replace('"tools/call"', `"tools/call","padding":"${'x'.repeat(300 * 1024)}"`),
      {},
      413,
      -32000,
      'the body limit is 256 KiB',
      'max_bytes',
      null,
    ],
    [
      'another charset',
      submitText,
      { 'content-type': 'application/json; charset=iso-8859-1' },
      415,
      -32000,
      'send UTF-8 JSON',
      undefined,
      null,
    ],
  ])(
    'answers %s as the transport answers its own refusals, a JSON-RPC error, not problem+json, and submits nothing',
    async (_what, body, headers, status, code, says, rule, id) => {
      const before = await executionCount();
      const res = await http(stack.apiUrl, 'POST', '/mcp', {
        key: DEMO.agent,
        rawBody: body(),
        headers: { ...HEADERS, ...headers },
      });
      expect(res.status).toBe(status);
      expect(res.headers.get('content-type')).toMatch(/^application\/json/);
      expect(res.body).toMatchObject({
        jsonrpc: '2.0',
        id,
        error: { code, message: expect.stringContaining(says) },
      });
      expect(Object.keys(res.body as object).sort()).toEqual(['error', 'id', 'jsonrpc']);
      // The field errors a problem would have listed, as the error's data.
      const data = (res.body as { error: { data?: { errors: { rule: string }[] } } }).error.data;
      expect(data?.errors[0].rule).toEqual(rule);
      expect(await executionCount()).toBe(before);
    },
  );

  // Unknown fields are rejected, never dropped — in a query too, as on /v1: `POST /mcp?dry_run=true` carried out the
  // submission in it as if the parameter had not been there.
  it('refuses a query parameter as an Invalid Request naming it (unknown_field), and submits nothing', async () => {
    const before = await executionCount();
    const res = await http(stack.apiUrl, 'POST', '/mcp?dry_run=true', {
      key: DEMO.agent,
      rawBody: submitText(),
      headers: HEADERS,
    });
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.body).toMatchObject({
      jsonrpc: '2.0',
      id: 7,
      error: {
        code: -32600,
        message: expect.stringContaining('unknown query parameter "dry_run"'),
        data: { errors: [expect.objectContaining({ field: 'dry_run', rule: 'unknown_field' })] },
      },
    });
    expect(await executionCount()).toBe(before);
  });

  it('rejects the MCP SDK client’s call with the refusal as its message (it does not wait for an answer)', async () => {
    const client = new Client({ name: 'verity-mcp-transport-e2e', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${stack.apiUrl}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${DEMO.agent}` } },
      }),
    );
    try {
      const before = await executionCount();
      // No timeout of the SDK's decides this: the test's own (a hang) would fail it, the refusal rejects at once.
      await expect(
        client.callTool({
          name: 'submit_execution',
          arguments: { ...submission([sms(unique('sdk-nul'))]), intent: 'a\u0000b' },
        }),
      ).rejects.toMatchObject({
        code: 400,
        message: expect.stringMatching(
          /"id":1,"error":\{"code":-32600,"message":"Invalid Request: params\.arguments\.intent: control/,
        ),
      });
      expect(await executionCount()).toBe(before);
    } finally {
      await client.close();
    }
  });

  it('still answers the same refusals on the REST API as problem+json', async () => {
    const res = await http(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      rawBody: '{"agent_id": ',
      headers: { 'content-type': 'application/json' },
    });
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.body).toMatchObject({ errors: [{ field: '(body)', rule: 'json' }] });
  });

  it('answers a batch whose ids differ only in their JSON type (1 and "1" are two ids), and its notifications', async () => {
    const res = await post([
      { ...listTools, id: 1 },
      { ...listTools, id: '1' },
      { jsonrpc: '2.0', method: 'notifications/initialized' },
    ]);
    expect(res.status).toBe(200);
    const ids = res.text
      .split('\n')
      .filter((line) => line.startsWith('data: '))
      .map((line) => (JSON.parse(line.slice('data: '.length)) as { id: unknown }).id);
    expect(ids.sort()).toEqual([1, '1']);
  });

  it('still answers a batch of one request', async () => {
    const res = await post([listTools]);
    expect(res.status).toBe(200);
    expect(message(res.text).result?.tools).toBeDefined();
  });

  it('answers tools/call with "arguments": null -32602 (invalid params) naming the field, and submits nothing', async () => {
    const before = await executionCount();
    const res = await post({
      jsonrpc: '2.0',
      id: 9,
      method: 'tools/call',
      params: { name: 'submit_execution', arguments: null },
    });
    expect(res.status).toBe(200);
    expect(message(res.text)).toEqual({
      jsonrpc: '2.0',
      id: 9,
      error: { code: -32602, message: expect.stringMatching(/^Invalid params of tools\/call: params\.arguments: /) },
    });
    expect(await executionCount()).toBe(before);
  });

  it('serves a request with params.task as one without it (the server declares no tasks), not -32603', async () => {
    const res = await post({ jsonrpc: '2.0', id: 10, method: 'tools/list', params: { task: { ttl: 60000 } } });
    expect(res.status).toBe(200);
    const answer = message(res.text);
    expect(answer.error).toBeUndefined();
    expect(answer.result).toMatchObject({
      tools: expect.arrayContaining([expect.objectContaining({ name: 'get_execution' })]),
    });
  });
});

describe('MCP: the connection the client asks to close', () => {
  // The transport named `Connection: keep-alive` on every answer, and Node kept the connection open on that word though
  // the client had said `Connection: close` (or spoke HTTP/1.0, which closes unless asked not to): the answer came, and
  // the connection stayed open on the server until the client gave up on it (RFC 9112, section 9.6).
  it.each([
    ['HTTP/1.1 with Connection: close', 'HTTP/1.1', 'Connection: close\r\n'],
    ['HTTP/1.0 without keep-alive', 'HTTP/1.0', ''],
  ])(
    '%s: the answer says close, and the server closes it',
    async (_what, version, connection) => {
      const body = JSON.stringify(listTools);
      const res = await rawExchange(
        stack.apiUrl,
        `POST /mcp ${version}\r\nHost: ${new URL(stack.apiUrl).host}\r\nAuthorization: Bearer ${DEMO.agent}\r\n` +
          `Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\n${connection}\r\n${body}`,
        // Written without ending: a half-closed socket would be closed by the server whatever the answer said.
        { halfClose: false },
      );
      expect(res.status).toBe(200);
      expect(res.headers.connection).toBe('close');
      expect(message(res.body).result?.tools).toBeDefined();
    },
    15_000,
  );
});
