import { createApiKey } from '@verity/persistence/api-keys';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http, sms, submission, unique } from '../support/http';

/**
 * The MCP requests all keys together may have in flight in one API process. Bounded per key only, three keys of one
 * tenant (100 waits each) held /health/live for 10 s: every tenant lost the API. Now a tenant's keys together take at
 * most half the process's bound, so another tenant is still served, and all tenants together at most the bound; past
 * either the POST is refused whole (429), before anything in it runs.
 */
const PER_KEY = 3;
const PER_PROCESS = 7;
/** Half the process's bound, rounded up. */
const PER_TENANT = 4;
const HEADERS = {
  accept: 'application/json, text/event-stream',
  'content-type': 'application/json',
  'mcp-protocol-version': '2025-03-26',
};

let stack: Stack;

beforeAll(async () => {
  stack = await Stack.start({
    label: 'mcp-in-flight-process',
    dispatchers: 0,
    reconcilers: 0,
    env: { MAX_MCP_REQUESTS_PER_KEY: String(PER_KEY), MAX_MCP_REQUESTS_PER_PROCESS: String(PER_PROCESS) },
  });
}, 120_000);

afterAll(async () => {
  await stack?.stop();
});

function post(body: unknown, key: string) {
  return http(stack.apiUrl, 'POST', '/mcp', { key, rawBody: JSON.stringify(body), headers: HEADERS });
}

function toolCall(id: number, name: string, args: Record<string, unknown>) {
  return { jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } };
}

/** An execution of the key's tenant that never settles (no dispatcher runs): a wait on it holds its place. */
async function unsettled(key: string): Promise<string> {
  const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
    key,
    body: submission([sms(unique('held'))]),
  });
  expect(created.status).toBe(201);
  return created.body.id;
}

function waits(key: string, executionId: string, ids: number[]) {
  return ids.map((id) =>
    post(toolCall(id, 'wait_for_execution', { execution_id: executionId, timeout_seconds: 50 }), key),
  );
}

/**
 * Asks with a list_connectors until it is refused (the places asked for before are then counted), however long that
 * takes: the test's timeout bounds it.
 */
function refusedOnce(key: string) {
  return waitFor(
    () => post(toolCall(1, 'list_connectors', {}), key),
    (res) => res.status === 429,
    Infinity,
    50,
  );
}

async function cancel(key: string, ids: number[]) {
  for (const requestId of ids) {
    const res = await post({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId } }, key);
    expect(res.status).toBe(202);
  }
}

const tooMany = (says: string) => ({
  type: 'https://verity.dev/problems/too-many-mcp-requests',
  status: 429,
  detail: expect.stringContaining(says),
});

describe('MCP: requests in flight per tenant and per process', () => {
  it("bounds one tenant's keys together, serves another tenant, then bounds all of them; the room comes back", async () => {
    // A second key of each tenant, beside the demo keys.
    const demoSecond = (await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo', role: 'agent' })).key;
    const otherSecond = (await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo-other', role: 'agent' }))
      .key;
    const demoExecution = await unsettled(DEMO.agent);
    const otherExecution = await unsettled(DEMO.otherAgent);

    // The demo agent key holds its own bound.
    const held = waits(DEMO.agent, demoExecution, [100, 101, 102]);
    expect((await refusedOnce(DEMO.agent)).body).toMatchObject(tooMany('of one key'));
    // Another key of the tenant: a batch past the tenant's share is refused whole; one more wait is its last place.
    const batch = await post(
      [101, 102].map((id) => toolCall(id, 'wait_for_execution', { execution_id: demoExecution, timeout_seconds: 50 })),
      demoSecond,
    );
    expect(batch.status).toBe(429);
    expect(batch.headers.get('retry-after')).toBe('5');
    expect(batch.body).toMatchObject(tooMany(`at most ${PER_TENANT} MCP requests of one tenant`));
    held.push(...waits(demoSecond, demoExecution, [200]));
    const tenantFull = await refusedOnce(demoSecond);
    expect(tenantFull.body).toMatchObject(tooMany('of one tenant'));
    // The tenant's third key has none of its own in flight, and is refused all the same.
    expect((await post(toolCall(1, 'list_connectors', {}), DEMO.admin)).body).toMatchObject(tooMany('of one tenant'));

    // Another tenant is still served, up to the process's bound.
    expect((await post(toolCall(2, 'list_connectors', {}), DEMO.otherAgent)).status).toBe(200);
    held.push(...waits(DEMO.otherAgent, otherExecution, [300, 301, 302]));
    expect((await refusedOnce(DEMO.otherAgent)).body).toMatchObject(tooMany('of one key'));
    const processFull = await post(toolCall(3, 'list_connectors', {}), otherSecond);
    expect(processFull.status).toBe(429);
    expect(processFull.body).toMatchObject(tooMany(`at most ${PER_PROCESS} MCP requests of all tenants`));

    // Cancellations are never refused, and free the places of the requests they stop.
    await cancel(DEMO.agent, [100, 101, 102]);
    await cancel(demoSecond, [200]);
    await cancel(DEMO.otherAgent, [300, 301, 302]);
    for (const wait of await Promise.all(held)) expect(wait.status).toBe(200);
    expect((await post(toolCall(4, 'list_connectors', {}), otherSecond)).status).toBe(200);
    expect((await post(toolCall(5, 'list_connectors', {}), DEMO.admin)).status).toBe(200);
  }, 90_000);
});
