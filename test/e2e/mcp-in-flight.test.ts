import { DEMO, Stack } from '../support/stack';
import { http, sms, submission, unique } from '../support/http';

/**
 * The MCP requests one key may have in flight in one API process. Each holds a server, its API calls and (for a wait)
 * a stream or a poll for up to 50 s: 20 POSTs of 100 waits from one key ran the API out of memory (it died). Past the
 * limit a POST is refused whole (429), before anything in it runs; notifications (a cancellation) are never refused.
 */
const LIMIT = 3;
const HEADERS = {
  accept: 'application/json, text/event-stream',
  'content-type': 'application/json',
  'mcp-protocol-version': '2025-03-26',
};

let stack: Stack;

beforeAll(async () => {
  stack = await Stack.start({
    label: 'mcp-in-flight',
    dispatchers: 0,
    reconcilers: 0,
    env: { MAX_MCP_REQUESTS_PER_KEY: String(LIMIT) },
  });
}, 120_000);

afterAll(async () => {
  await stack?.stop();
});

function post(body: unknown, key: string = DEMO.agent) {
  return http(stack.apiUrl, 'POST', '/mcp', { key, rawBody: JSON.stringify(body), headers: HEADERS });
}

function toolCall(id: number, name: string, args: Record<string, unknown>) {
  return { jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } };
}

async function executionCount(): Promise<number> {
  const [row] = (await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM executions`)) as { n: number }[];
  return row.n;
}

describe('MCP: requests in flight per key', () => {
  // A 429 says "again later", and no later would ever take it: the batch is what is wrong, as an empty one is.
  it('refuses a batch of more requests than the limit could ever take 400 (-32600, split it), and carries out none', async () => {
    const before = await executionCount();
    const batch = Array.from({ length: LIMIT + 1 }, (_, i) =>
      toolCall(i + 1, 'submit_execution', submission([sms(unique('in-flight'))])),
    );
    const res = await post(batch);
    expect(res.status).toBe(400);
    expect(res.headers.get('retry-after')).toBeNull();
    expect(res.body).toEqual({
      jsonrpc: '2.0',
      id: null,
      error: {
        code: -32600,
        message: expect.stringContaining(`carries ${LIMIT + 1} requests; at most ${LIMIT} of one key`),
      },
    });
    expect((res.body as { error: { message: string } }).error.message).toMatch(/split it/);
    expect(await executionCount()).toBe(before);
    // A batch the limit can take, when the key holds nothing, is carried out.
    const fits = await post(batch.slice(0, LIMIT));
    expect(fits.status).toBe(200);
    expect(await executionCount()).toBe(before + LIMIT);
  });

  it('counts the waits a key holds open; another key is served, a cancellation gets through, and the room comes back', async () => {
    const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([sms(unique('held'))]),
    });
    expect(created.status).toBe(201);
    // No dispatcher runs: the execution never settles, so each wait holds its place until it is cancelled.
    const waits = Array.from({ length: LIMIT }, (_, i) =>
      post(toolCall(100 + i, 'wait_for_execution', { execution_id: created.body.id, timeout_seconds: 50 })),
    );
    const listConnectors = (id: number, key?: string) => post(toolCall(id, 'list_connectors', {}), key);
    // Refused once the waits hold every place (each is counted as its POST arrives).
    let refused = await listConnectors(1);
    for (let i = 0; refused.status !== 429 && i < 200; i += 1) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      refused = await listConnectors(1);
    }
    expect(refused.status).toBe(429);
    expect(refused.body).toMatchObject({ type: 'https://verity.dev/problems/too-many-mcp-requests' });
    // Another key's requests are its own.
    const other = await listConnectors(2, DEMO.otherAgent);
    expect(other.status).toBe(200);
    // A cancellation is a notification: never refused, and it frees the places of the requests it stops.
    for (let i = 0; i < LIMIT; i += 1) {
      const cancelled = await post({
        jsonrpc: '2.0',
        method: 'notifications/cancelled',
        params: { requestId: 100 + i },
      });
      expect(cancelled.status).toBe(202);
    }
    for (const wait of await Promise.all(waits)) expect(wait.status).toBe(200);
    expect((await listConnectors(3)).status).toBe(200);
  }, 60_000);
});
