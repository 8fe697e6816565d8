import { type ServerResponse, createServer } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import {
  type CallToolResult,
  type JSONRPCMessage,
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { Verity } from '../client';
import { MAX_SUBSCRIPTIONS, type VerityMcpOptions, createVerityMcpServer } from './server';
import { closedAfterEachTest, listenLocally, waitUntil } from '../../../../test/support/local-server';
import { UNIT_SUBMISSION } from '../../../../test/support/http';

/** Closers of the MCP sessions a test opened: run after it, before its HTTP servers close, so no test needs try/finally. */
const openSessions: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of openSessions.splice(0)) await close();
});
const closeAfterTest = closedAfterEachTest();

const SUBMISSION = UNIT_SUBMISSION;

/**
 * An MCP client over an in-memory connection to the server (with `options`), whose SDK client talks to `baseUrl`;
 * closed after the test.
 */
async function connectMcp(baseUrl: string, options: Omit<VerityMcpOptions, 'client'> = {}) {
  const mcp = createVerityMcpServer({ client: new Verity({ baseUrl, apiKey: 'sk-unit', backoffMs: 5 }), ...options });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await mcp.server.connect(serverSide);
  const client = new Client({ name: 'unit', version: '0' });
  await client.connect(clientSide);
  openSessions.push(async () => {
    mcp.close();
    await client.close();
    await mcp.server.close();
  });
  return {
    client,
    call: async (name: string, args: Record<string, unknown>, requestOptions?: Parameters<Client['callTool']>[2]) =>
      (await client.callTool({ name, arguments: args }, undefined, requestOptions)) as CallToolResult,
  };
}

/** connectMcp to an API that answers every request with one problem (`status`, `code`, `title`). */
async function connectMcpToProblem(status: number, code: string, title: string) {
  const server = createServer((req, res) => {
    req.resume();
    res.writeHead(status, { 'content-type': 'application/problem+json' });
    res.end(JSON.stringify({ type: 'about:blank', code, title, status }));
  });
  const { url } = await closeAfterTest(await listenLocally(server));
  return connectMcp(url);
}

/** A local API that counts the requests it receives and answers each 500: a test that must call nothing reads the count. */
async function countingApi(): Promise<{ url: string; requests: () => number }> {
  let requests = 0;
  const server = createServer((req, res) => {
    requests += 1;
    req.resume();
    res.writeHead(500).end();
  });
  const { url } = await closeAfterTest(await listenLocally(server));
  return { url, requests: () => requests };
}

function textOf(result: CallToolResult): string {
  return result.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');
}

/** The Idempotency-Key a failed submit_execution names for repeating the submission. */
function idempotencyKeyOf(result: CallToolResult): string {
  return (result.structuredContent as { error: { idempotency_key: string } }).error.idempotency_key;
}

describe('submit_execution when the answer does not settle whether the submission was accepted', () => {
  it('after a dropped first attempt and 503s, names the key to repeat with instead of "refused"', async () => {
    let requests = 0;
    const server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        requests += 1;
        // The first attempt arrives (and, for all the client knows, is carried out); its answer is lost.
        if (requests === 1) {
          req.socket.destroy();
          return;
        }
        res.writeHead(503, { 'content-type': 'application/problem+json' });
        res.end(JSON.stringify({ type: 'about:blank', title: 'Service unavailable', status: 503 }));
      });
    });
    const { url } = await closeAfterTest(await listenLocally(server));
    const mcp = await connectMcp(url);
    const result = await mcp.call('submit_execution', SUBMISSION);
    expect(requests).toBe(3);
    expect(result.isError).toBe(true);
    const text = textOf(result);
    expect(text).not.toMatch(/^Refused/);
    expect(text).toMatch(/may have been accepted/);
    const key = idempotencyKeyOf(result);
    expect(key).toMatch(/^[0-9a-f-]{36}$/);
    expect(text).toContain(key);
  });

  it('a 500 on the only attempt may hide an accepted submission: the key is given', async () => {
    const server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(500, { 'content-type': 'text/html' });
        res.end('<html>upstream error</html>');
      });
    });
    const { url } = await closeAfterTest(await listenLocally(server));
    const mcp = await connectMcp(url);
    const result = await mcp.call('submit_execution', { ...SUBMISSION, idempotency_key: 'order-1-charge' });
    expect(result.isError).toBe(true);
    expect(textOf(result)).toMatch(/may have been accepted/);
    expect(textOf(result)).toContain('"order-1-charge"');
  });
});

describe('a call that changes nothing, when the API cannot answer it', () => {
  it('wait_for_execution whose API stops answering says to wait again, never to submit again', async () => {
    // The API going away mid-wait (a restart): the first read is answered, then every connection is dropped.
    let requests = 0;
    const server = createServer((req, res) => {
      req.resume();
      requests += 1;
      if (requests === 1) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id: 'exe_1', status: 'running', operations: [] }));
        return;
      }
      req.socket.destroy();
    });
    const { url } = await closeAfterTest(await listenLocally(server));
    const mcp = await connectMcp(url);
    const result = await mcp.call('wait_for_execution', { execution_id: 'exe_1', timeout_seconds: 30 });
    expect(requests).toBeGreaterThan(1);
    expect(result.isError).toBe(true);
    expect(textOf(result)).toMatch(/^No answer from Verity \(/);
    expect(textOf(result)).toMatch(
      /Nothing was changed by this call: call wait_for_execution again to keep waiting; never submit the execution again\.$/,
    );
  });

  it.each([
    ['get_execution', { execution_id: 'exe_1' }, 'it'],
    ['wait_for_execution', { execution_id: 'exe_1' }, 'wait_for_execution'],
  ])('%s answered 503 is "could not answer now, call again", not "Refused"', async (name, args, again) => {
    const mcp = await connectMcpToProblem(503, 'unavailable', 'Service unavailable');
    const result = await mcp.call(name, args);
    expect(result.isError).toBe(true);
    expect(textOf(result)).toMatch(/^Verity could not answer now \(503 /);
    expect(textOf(result)).toContain(`Nothing was changed by this call: call ${again} again`);
    expect(textOf(result)).not.toMatch(/Refused/);
  });

  it('a 4xx refusal of a read stays a refusal', async () => {
    const mcp = await connectMcpToProblem(404, 'not-found', 'Not found');
    const result = await mcp.call('get_execution', { execution_id: 'exe_1' });
    expect(textOf(result)).toMatch(/^Refused: 404 /);
    expect(textOf(result)).not.toMatch(/call it again/);
  });
});

describe('the histories, read after the status they are shown with', () => {
  // The events are read after the execution (or the operation): a change between the two reads (here the reconciler's
  // VERIFIED) was shown as the operation's history while its status, as GET /v1/executions/{id} answered it, was still
  // RECONCILING — "RECONCILING … wait" beside "history: … → VERIFIED", one answer saying two things.
  const operation = {
    id: 'op_1',
    execution_id: 'exe_1',
    key: 'charge',
    connector: 'sandbox.payments',
    action: 'charge',
    status: 'RECONCILING',
    verification_method: 'read_after_write',
    no_change_required: false,
    commit: 'unknown',
    retry: 'forbidden',
    terminal_reason: null,
    failure: null,
    recovery_obligation: null,
  };
  const execution = {
    id: 'exe_1',
    status: 'running',
    effects: { summary: 'unknown', counts: { RECONCILING: 1 } },
    failure: null,
    outcome: null,
    operations: [operation],
  };
  const path = [
    ['PREPARED', 'SENT'],
    ['SENT', 'UNKNOWN'],
    ['UNKNOWN', 'RECONCILING'],
    ['RECONCILING', 'VERIFIED'],
  ];
  const events = path.map(([from, to], i) => ({
    id: `evt_${i + 1}`,
    seq: i + 1,
    type: 'operation.status_changed',
    operation_id: 'op_1',
    from_status: from,
    to_status: to,
  }));

  async function apiAheadOfItsStatus() {
    const server = createServer((req, res) => {
      req.resume();
      const path = new URL(req.url ?? '/', 'http://x').pathname;
      const body =
        path === '/v1/executions/exe_1'
          ? execution
          : path === '/v1/operations/op_1'
            ? operation
            : path === '/v1/executions/exe_1/events'
              ? { data: events, next_cursor: null }
              : undefined;
      res.writeHead(body ? 200 : 404, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body ?? {}));
    });
    const { url } = await closeAfterTest(await listenLocally(server));
    return connectMcp(url);
  }

  it.each([
    ['get_execution', { execution_id: 'exe_1' }],
    ['get_operation', { operation_id: 'op_1' }],
  ])('%s shows each history up to the status it states, never past it', async (name, args) => {
    const mcp = await apiAheadOfItsStatus();
    const result = await mcp.call(name, args);
    expect(result.isError).toBeFalsy();
    const text = textOf(result);
    expect(text).toContain('PREPARED → SENT → UNKNOWN → RECONCILING');
    expect(text).not.toContain('VERIFIED');
    const structured = result.structuredContent as {
      report: { history?: string[]; operations?: { history?: string[] }[] };
    };
    const history = structured.report.history ?? structured.report.operations?.[0].history;
    expect(history).toEqual(['PREPARED', 'SENT', 'UNKNOWN', 'RECONCILING']);
  });
});

describe('a subscribed execution whose stream ends while it can still change', () => {
  for (const reason of ['deadline', 'key_revoked'] as const) {
    it(`says the updates stopped when the stream ends with reason ${reason}, never falls silent`, async () => {
      const server = createServer((req, res) => {
        req.resume();
        if (req.url === '/v1/executions/exe_1') {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ id: 'exe_1', status: 'completed', operations: [] }));
          return;
        }
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const event = { id: 'evt_1', seq: 1, type: 'operation.status_changed', to_status: 'MANUAL_REVIEW' };
        res.end(`id: evt_1\ndata: ${JSON.stringify(event)}\n\nevent: end\ndata: {"reason":"${reason}"}\n\n`);
      });
      const { url } = await closeAfterTest(await listenLocally(server));
      const mcp = await connectMcp(url, { subscriptions: true });
      const updated: string[] = [];
      const said = new Promise<string>((resolve) =>
        mcp.client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => resolve(String(n.params.data))),
      );
      mcp.client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => void updated.push(n.params.uri));
      await mcp.client.subscribeResource({ uri: 'verity://executions/exe_1' });
      const message = await said;
      expect(message).toContain('verity://executions/exe_1');
      expect(message).toContain(reason);
      expect(message).toMatch(/re-read the resource or call wait_for_execution/);
      expect(updated).toEqual(['verity://executions/exe_1']);
    });
  }
});

describe('subscriptions, bounded', () => {
  it('refuses a subscription past maxSubscriptions with a clear error; one already held, or freed, is taken', async () => {
    // An API whose executions exist and whose streams stay open: each subscription holds one.
    const server = createServer((req, res) => {
      req.resume();
      if (/^\/v1\/executions\/exe_\d+$/.test(req.url ?? '')) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id: req.url!.split('/').pop(), status: 'running', operations: [] }));
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(': open\n\n');
    });
    const { url } = await closeAfterTest(await listenLocally(server));
    const mcp = await connectMcp(url, { subscriptions: true, maxSubscriptions: 2 });
    const uri = (n: number) => `verity://executions/exe_${n}`;
    await mcp.client.subscribeResource({ uri: uri(1) });
    await mcp.client.subscribeResource({ uri: uri(2) });
    // The same execution again is the subscription already held: nothing more to follow.
    await mcp.client.subscribeResource({ uri: uri(1) });
    await expect(mcp.client.subscribeResource({ uri: uri(3) })).rejects.toMatchObject({
      code: -32600,
      message: expect.stringContaining('at most 2 subscriptions at once'),
    });
    await mcp.client.unsubscribeResource({ uri: uri(2) });
    await mcp.client.subscribeResource({ uri: uri(3) });
  });

  it('makes room once a followed execution has settled (its stream ended), and once a subscription is refused', async () => {
    // exe_1's stream stays open until the test ends it with the execution settled; exe_2's stays open.
    const open = new Map<string, ServerResponse>();
    const server = createServer((req, res) => {
      req.resume();
      const read = /^\/v1\/executions\/(exe_\d+)$/.exec(req.url ?? '');
      if (read) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id: read[1], status: 'running', operations: [] }));
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(': open\n\n');
      const streamed = /^\/v1\/executions\/(exe_\d+)\/stream/.exec(req.url ?? '')?.[1];
      if (streamed) open.set(streamed, res);
    });
    const { url } = await closeAfterTest(await listenLocally(server));
    const mcp = await connectMcp(url, { subscriptions: true, maxSubscriptions: 1 });
    const uri = (n: number) => `verity://executions/exe_${n}`;
    await mcp.client.subscribeResource({ uri: uri(1) });
    await waitUntil(() => open.has('exe_1'));
    // Refused more times than the bound: a refusal takes no room of its own.
    for (let i = 0; i < 2; i += 1) {
      await expect(mcp.client.subscribeResource({ uri: uri(2) })).rejects.toMatchObject({ code: -32600 });
    }
    open.get('exe_1')!.end('event: end\ndata: {"reason":"settled"}\n\n');
    // The follower of exe_1 ends with its stream: exe_2 is taken once it has (never before the end was sent).
    let taken = false;
    while (!taken) {
      taken = await mcp.client.subscribeResource({ uri: uri(2) }).then(
        () => true,
        (error: { code?: number }) => {
          if (error.code !== -32600) throw error;
          return false;
        },
      );
    }
    await waitUntil(() => open.has('exe_2'));
  });

  it('holds at most 20 by default, as many as the streams a key may hold by default', async () => {
    expect(MAX_SUBSCRIPTIONS).toBe(20);
  });
});

describe('the execution resources, listed page by page', () => {
  it('says there is more after a full page and serves the next page for its cursor, never a silent cut', async () => {
    const asked: string[] = [];
    const server = createServer((req, res) => {
      req.resume();
      const url = new URL(req.url!, 'http://x');
      asked.push(url.search);
      const cursor = url.searchParams.get('cursor');
      const ids =
        cursor === 'exe_050'
          ? ['exe_051']
          : Array.from({ length: 50 }, (_, i) => `exe_${String(i + 1).padStart(3, '0')}`);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          data: ids.map((id) => ({ id, intent: `intent of ${id}` })),
          next_cursor: cursor ? null : 'exe_050',
        }),
      );
    });
    const { url } = await closeAfterTest(await listenLocally(server));
    const mcp = await connectMcp(url);
    const first = await mcp.client.listResources();
    expect(first.resources).toHaveLength(50);
    expect(first.nextCursor).toBeDefined();
    const second = await mcp.client.listResources({ cursor: first.nextCursor });
    expect(second.resources.map((r) => r.uri)).toEqual(['verity://executions/exe_051']);
    expect(second.nextCursor).toBeUndefined();
    expect(asked[1]).toContain('cursor=exe_050');
  });
});

describe('an execution resource whose intent is cut for its title', () => {
  it('shows a direction mark of its first 200 units as written when the intent holds right-to-left letters after them', async () => {
    // Taken by the API: the intent holds Arabic (after the cut), so its marks are writing. The title's 200 units hold
    // none of it; judged alone, the mark read as one in text without right-to-left letters, and showed as \u200f.
    const cut = `${'b'.repeat(195)}\u200F ok `;
    // Without right-to-left letters anywhere, the mark still shows escaped.
    const latin = `paid\u200F ${'c'.repeat(300)}`;
    const intents = [`${cut}\u062A\u0645`, latin];
    const server = createServer((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ data: intents.map((intent, i) => ({ id: `exe_${i}`, intent })), next_cursor: null }));
    });
    const { url } = await closeAfterTest(await listenLocally(server));
    const { resources } = await (await connectMcp(url)).client.listResources();
    expect(resources.map((r) => r.title)).toEqual([cut, `paid\\u200f ${'c'.repeat(194)}`]);
  });
});

describe('the execution resources, listed from a cursor that is none', () => {
  it.each([
    ['a lone surrogate', '\ud800'],
    ['longer than any URL the API reads', `exe_${'a'.repeat(70_000)}`],
    ['not an execution id', 'op_abc'],
  ])('refuses a cursor that is %s -32602 naming it, and asks the API nothing', async (_, cursor) => {
    const api = await countingApi();
    const mcp = await connectMcp(api.url);
    const refusal = await mcp.client.listResources({ cursor }).then(
      () => undefined,
      (error: unknown) => error as { code?: number; message?: string },
    );

    expect(refusal?.code).toBe(-32602);
    expect(refusal?.message).toContain('not a cursor of this list');
    expect(api.requests()).toBe(0);
  });
});

describe('submit_execution with a key that names Object.prototype', () => {
  it('refuses params or expected_state with a "__proto__" key, as the API does, instead of sending them without it', async () => {
    const bodies: string[] = [];
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        bodies.push(Buffer.concat(chunks).toString());
        res.writeHead(201, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({ id: 'exe_1', status: 'created', operations: [], effects: { summary: 'none', counts: {} } }),
        );
      });
    });
    const { url } = await closeAfterTest(await listenLocally(server));
    const mcp = await connectMcp(url);
    for (const field of ['params', 'expected_state']) {
      // JSON.parse makes "__proto__" an own key, as it arrives in a tool call.
      const operation = JSON.parse(
        `{"key":"charge","connector":"sandbox.payments","action":"charge","params":{"amount":5},` +
          `"${field}":{"__proto__":{"amount":1},"currency":"EUR"}}`,
      ) as Record<string, unknown>;
      const result = await mcp.call('submit_execution', { ...SUBMISSION, operations: [operation] });
      expect(result.isError).toBe(true);
      expect(textOf(result)).toContain('__proto__');
    }
    expect(bodies).toEqual([]);
  });
});

describe("a tool's whole-number argument past 2^53", () => {
  // zod's int() refuses such a number on its own ("expected int to be <=9007199254740991"): 1e300 was told that and the
  // argument's own range, two refusals of one argument, the first naming a bound it does not have.
  it.each([
    ['wait_for_execution', { execution_id: 'exe_1', timeout_seconds: 1e300 }, 'timeout_seconds', '<=50'],
    ['wait_for_execution', { execution_id: 'exe_1', timeout_seconds: -1e300 }, 'timeout_seconds', '>=1'],
    ['submit_execution', { ...SUBMISSION, deadline_seconds: 1e300 }, 'deadline_seconds', '<=604800'],
  ])('%s is told only its own range', async (tool, args, field, range) => {
    const api = await countingApi();
    const mcp = await connectMcp(api.url);
    const result = await mcp.call(tool, args);
    expect(result.isError).toBe(true);
    const text = textOf(result);
    expect(text).toContain(range);
    expect(text).not.toContain(String(Number.MAX_SAFE_INTEGER));
    expect(text.split(`at ${field}`)).toHaveLength(2);
    expect(api.requests()).toBe(0);
  });
});

describe("a tool's argument of the wrong type", () => {
  // zod runs a length check on any value that has a length, also after the type check refused it: agent_id: [] was
  // told "expected string" and "expected array to have >=1 items", as if the argument took an array.
  it.each([
    ['submit_execution', 'agent_id', { ...SUBMISSION, agent_id: [] }, 'expected string, received array'],
    [
      'submit_execution',
      'operations',
      { ...SUBMISSION, operations: 'x'.repeat(200) },
      'expected array, received string',
    ],
    ['submit_execution', 'idempotency_key', { ...SUBMISSION, idempotency_key: [] }, 'expected string, received array'],
    [
      'cancel_execution',
      'reason',
      { execution_id: 'exe_1', reason: Array(2000).fill('x') },
      'expected string, received array',
    ],
    ['get_execution', 'execution_id', { execution_id: Array(300).fill('x') }, 'expected string, received array'],
  ])('%s is told only the type of %s', async (tool, field, args, said) => {
    const api = await countingApi();
    const mcp = await connectMcp(api.url);
    const result = await mcp.call(tool, args as Record<string, unknown>);
    expect(result.isError).toBe(true);
    const text = textOf(result);
    expect(text).toContain(`${said} at ${field}`);
    expect(text.split(`at ${field}`)).toHaveLength(2);
    expect(api.requests()).toBe(0);
  });
});

describe('submit_execution against an API that does not answer', () => {
  it('answers within its bound, before an MCP client gives up, with the key to repeat with', async () => {
    let requests = 0;
    const server = createServer((req) => {
      req.resume();
      requests += 1; // received, never answered: it may be carried out
    });
    const { url } = await closeAfterTest(await listenLocally(server));
    // The SDK's own bounds (30 s a request, 3 attempts) outlast the 60 s an MCP client waits for an answer.
    const mcp = await connectMcp(url, { submitTimeoutMs: 500 });
    const result = await mcp.call('submit_execution', SUBMISSION, { timeout: 10_000 });
    expect(requests).toBeGreaterThanOrEqual(1);
    expect(result.isError).toBe(true);
    const text = textOf(result);
    expect(text).toMatch(/may have been accepted/);
    const key = idempotencyKeyOf(result);
    expect(key).toMatch(/^[0-9a-f-]{36}$/);
    expect(text).toContain(key);
  });
});

describe('the other tools and the resources against an API that does not answer', () => {
  /** An API that receives every request and never answers it; `closed` counts the requests the client gave up. */
  async function silentApi() {
    const requests: string[] = [];
    let closed = 0;
    const server = createServer((req, res) => {
      req.resume();
      requests.push(`${req.method} ${req.url}`);
      res.on('close', () => (closed += 1));
    });
    const { url } = await closeAfterTest(await listenLocally(server));
    return { url, requests, closed: () => closed };
  }

  it.each([
    [
      'list_connectors',
      {},
      /^No answer from Verity \(no answer within 0\.3 s\)\. Nothing was changed by this call: call it again\.$/,
    ],
    [
      'get_execution',
      { execution_id: 'exe_1' },
      /^No answer from Verity \(no answer within 0\.3 s\)\. Nothing was changed by this call: call it again\.$/,
    ],
    [
      'get_operation',
      { operation_id: 'op_1' },
      /^No answer from Verity \(no answer within 0\.3 s\)\. Nothing was changed by this call: call it again\.$/,
    ],
    ['cancel_execution', { execution_id: 'exe_1' }, /the cancel may have been carried out: read the execution/],
  ])('%s answers within its bound, before an MCP client gives up', async (name, args, said) => {
    const api = await silentApi();
    const mcp = await connectMcp(api.url, { readTimeoutMs: 300 });
    const result = await mcp.call(name, args, { timeout: 10_000 });
    expect(api.requests).toHaveLength(1);
    expect(result.isError).toBe(true);
    expect(textOf(result)).toMatch(said);
    expect(textOf(result)).not.toMatch(/^Refused/);
  });

  it('a resource read and the resource list answer an error within the bound', async () => {
    const api = await silentApi();
    const mcp = await connectMcp(api.url, { readTimeoutMs: 300 });
    await expect(mcp.client.readResource({ uri: 'verity://executions/exe_1' }, { timeout: 10_000 })).rejects.toThrow(
      /no answer from Verity \(no answer within 0\.3 s\)/,
    );
    await expect(mcp.client.listResources(undefined, { timeout: 10_000 })).rejects.toThrow(
      /no answer from Verity \(no answer within 0\.3 s\)/,
    );
    expect(api.requests).toEqual(['GET /v1/executions/exe_1', 'GET /v1/executions?limit=50']);
  });

  it("a client's cancellation of its request aborts the API call", async () => {
    const api = await silentApi();
    const mcp = await connectMcp(api.url);
    const controller = new AbortController();
    const call = mcp.call('get_execution', { execution_id: 'exe_1' }, { signal: controller.signal, timeout: 10_000 });
    await waitUntil(() => api.requests.length === 1);
    controller.abort(new Error('the user moved on'));
    await expect(call).rejects.toThrow('the user moved on');
    await waitUntil(() => api.closed() === 1);
    expect(api.requests).toHaveLength(1);
  });
});

describe('a tool called with an argument it does not know', () => {
  it.each([
    ['wait_for_execution', { execution_id: 'exe_1', timeout: 50 }, 'timeout'],
    ['cancel_execution', { execution_id: 'exe_1', why: 'the customer asked' }, 'why'],
    ['get_execution', { execution_id: 'exe_1', include: 'events' }, 'include'],
    ['get_operation', { operation_id: 'op_1', execution_id: 'exe_1' }, 'execution_id'],
    ['list_connectors', { connector: 'sandbox.sms' }, 'connector'],
  ])(
    '%s refuses it, naming it, and calls nothing (a misspelt option is not silently dropped)',
    async (name, args, key) => {
      const api = await countingApi();
      const mcp = await connectMcp(api.url);
      const result = await mcp.call(name, args);
      expect(result.isError).toBe(true);
      expect(textOf(result)).toMatch(/Input validation error/);
      expect(textOf(result)).toContain(key);
      expect(api.requests()).toBe(0);
    },
  );

  it('every tool says so in its input schema (additionalProperties: false)', async () => {
    const mcp = await connectMcp('http://127.0.0.1:9');
    const { tools } = await mcp.client.listTools();
    expect(tools).toHaveLength(6);
    for (const tool of tools) expect([tool.name, tool.inputSchema.additionalProperties]).toEqual([tool.name, false]);
  });
});

describe('a tool name that is no tool', () => {
  it.each(['toString', '__proto__', 'constructor', 'hasOwnProperty', 'valueOf', 'no_such_tool'])(
    '%s is "not found", never "disabled" (a member every object inherits is no tool), and calls nothing',
    async (name) => {
      const api = await countingApi();
      const mcp = await connectMcp(api.url);
      const result = await mcp.call(name, {});
      expect(result.isError).toBe(true);
      expect(textOf(result)).toBe(`MCP error -32602: Tool ${name} not found`);
      expect(api.requests()).toBe(0);
    },
  );
});

/** Sends raw JSON-RPC requests (what an SDK client would never send) to the server and reads their answers. */
async function rawSession(baseUrl: string) {
  const mcp = createVerityMcpServer({ client: new Verity({ baseUrl, apiKey: 'sk-unit', backoffMs: 5 }) });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await mcp.server.connect(serverSide);
  const answers = new Map<unknown, JSONRPCMessage>();
  clientSide.onmessage = (message) => {
    if ('id' in message) answers.set(message.id, message);
  };
  await clientSide.start();
  openSessions.push(async () => {
    mcp.close();
    await clientSide.close();
    await mcp.server.close();
  });
  return async (message: Record<string, unknown>) => {
    await clientSide.send({ jsonrpc: '2.0', ...message } as JSONRPCMessage);
    await waitUntil(() => answers.has(message.id));
    return answers.get(message.id) as { error?: { code: number; message: string }; result?: unknown };
  };
}

/**
 * Red team (hostile pass 3): any request with a `params.task` object answered -32603 "Server does not support task
 * creation", an internal error for a client's input. The server declares no tasks capability, and MCP 2025-11-25 says
 * such a receiver "MUST process requests of that type normally, ignoring any task-augmentation metadata".
 */
describe('a request asking for task-augmented execution', () => {
  it.each([
    ['an object', { ttl: 60_000 }],
    ['an empty object', {}],
    ['no object', 'soon'],
  ])('with params.task %s is served as if the member were absent', async (_what, task) => {
    const api = await countingApi();
    const send = await rawSession(api.url);
    const listed = await send({ id: 1, method: 'tools/list', params: { task } });
    expect(listed.error).toBeUndefined();
    expect(listed.result).toMatchObject({
      tools: expect.arrayContaining([expect.objectContaining({ name: 'get_execution' })]),
    });
    const called = await send({ id: 2, method: 'tools/call', params: { name: 'get_execution', arguments: {}, task } });
    expect(called.error).toBeUndefined();
    expect(called.result).toMatchObject({ isError: true });
    expect(JSON.stringify(called.result)).toMatch(/Input validation error/);
    const ping = await send({ id: 3, method: 'ping', params: { task } });
    expect(ping).toMatchObject({ result: {} });
    expect(api.requests()).toBe(0);
  });
});

describe('a request whose params do not fit its method', () => {
  it.each([
    [
      'tools/call with "arguments": null',
      { method: 'tools/call', params: { name: 'get_execution', arguments: null } },
      'params.arguments: expected an object, received null (the tool’s arguments by name: send {} or leave it out for none)',
    ],
    [
      'tools/call with arguments that are no object',
      { method: 'tools/call', params: { name: 'submit_execution', arguments: [UNIT_SUBMISSION] } },
      'params.arguments: expected an object, received array (the tool’s arguments by name: send {} or leave it out for none)',
    ],
    [
      'tools/call whose tool name is no string',
      { method: 'tools/call', params: { name: 7, arguments: {} } },
      'params.name: expected a string, received number',
    ],
    [
      'resources/read whose uri is no string',
      { method: 'resources/read', params: { uri: null } },
      'params.uri: expected a string, received null',
    ],
    [
      'resources/read whose uri is empty',
      { method: 'resources/read', params: { uri: '' } },
      'params.uri: expected a URI (verity://executions/{id}), received ""',
    ],
    [
      'resources/read whose uri is no URI',
      { method: 'resources/read', params: { uri: 'exe_123' } },
      'params.uri: expected a URI (verity://executions/{id}), received "exe_123"',
    ],
    [
      'resources/list whose cursor is no string',
      { method: 'resources/list', params: { cursor: 5 } },
      'params.cursor: expected a string, received number',
    ],
  ])('%s is refused -32602 (invalid params) naming the field, and calls nothing', async (_what, request, problem) => {
    const api = await countingApi();
    const send = await rawSession(api.url);
    const answer = await send({ id: 3, ...request });
    expect(answer.error).toEqual({
      code: -32602,
      message: `Invalid params of ${request.method}: ${problem}`,
    });
    expect(api.requests()).toBe(0);
  });

  it('a method the server does not answer stays -32601 (method not found), whatever its params', async () => {
    const send = await rawSession('http://127.0.0.1:9');
    const answer = await send({ id: 4, method: 'prompts/get', params: { name: 5 } });
    expect(answer.error?.code).toBe(-32601);
  });

  it('params that fit still reach the tool: an empty object for a tool with required arguments is its own refusal', async () => {
    const send = await rawSession('http://127.0.0.1:9');
    const answer = await send({ id: 5, method: 'tools/call', params: { name: 'get_execution', arguments: {} } });
    expect(answer.error).toBeUndefined();
    expect(answer.result).toMatchObject({ isError: true });
    expect(JSON.stringify(answer.result)).toMatch(/Input validation error/);
  });
});

describe('wait_for_execution whose time ran out', () => {
  /** exe_1 with one charge of `opStatus`, as GET answers it. */
  function executionOf(status: string, opStatus: string, summary: string) {
    return {
      id: 'exe_1',
      status,
      effects: { summary, counts: { [opStatus]: 1 } },
      failure: null,
      outcome: null,
      criteria: [],
      criteria_results: null,
      operations: [
        {
          id: 'op_1',
          execution_id: 'exe_1',
          key: 'charge',
          connector: 'sandbox.payments',
          action: 'charge',
          status: opStatus,
          verification_method: 'read_after_write',
          no_change_required: false,
          terminal_reason: null,
          failure: null,
          recovery_obligation: null,
        },
      ],
    };
  }
  const UNSETTLED = executionOf('waiting_for_approval', 'PREPARED', 'none');
  const SETTLED = executionOf('completed', 'VERIFIED', 'all_verified');

  /**
   * An API whose stream tells `execution.created` and stays open (an approval awaited: nothing that can settle it
   * comes), whose GETs answer `reads` in turn (the last one after that), and whose log pages are empty.
   */
  async function awaitingApproval(reads: object[]) {
    const gets: string[] = [];
    const server = createServer((req, res) => {
      req.resume();
      if (req.url!.endsWith('/stream')) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const event = { id: 'evt_1', seq: 1, execution_id: 'exe_1', type: 'execution.created', to_status: 'created' };
        res.write(`retry: 10\n\nid: evt_1\nevent: execution.created\ndata: ${JSON.stringify(event)}\n\n`);
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      if (req.url!.includes('/events')) return res.end(JSON.stringify({ data: [], next_cursor: null }));
      gets.push(req.url!);
      res.end(JSON.stringify(reads[Math.min(gets.length, reads.length) - 1]));
    });
    const { url } = await closeAfterTest(await listenLocally(server));
    return { mcp: await connectMcp(url), gets };
  }

  // The wait ran out, and the execution settled before the state the answer carries was read: that state is the
  // answer, not "Not settled" with `timed_out` beside a report that says settled.
  it('answers a state read settled after the wait ran out as settled, not timed out', async () => {
    // The wait's read at expiry finds it still waiting; the read for the answer, settled.
    const { mcp, gets } = await awaitingApproval([UNSETTLED, SETTLED]);
    const result = await mcp.call('wait_for_execution', { execution_id: 'exe_1', timeout_seconds: 1 });
    expect(gets).toHaveLength(2);
    const structured = result.structuredContent as { timed_out: boolean; report: { settled: boolean } };
    expect(structured.report.settled).toBe(true);
    expect(structured.timed_out).toBe(false);
    expect(textOf(result)).not.toMatch(/Not settled/);
  });

  it('answers a state still unsettled as timed out, saying to call again', async () => {
    const { mcp } = await awaitingApproval([UNSETTLED]);
    const result = await mcp.call('wait_for_execution', { execution_id: 'exe_1', timeout_seconds: 1 });
    const structured = result.structuredContent as { timed_out: boolean; report: { settled: boolean } };
    expect(structured.report.settled).toBe(false);
    expect(structured.timed_out).toBe(true);
    expect(textOf(result)).toMatch(/^Not settled after 1 s; this is the current state\. Call wait_for_execution again/);
  });
});
