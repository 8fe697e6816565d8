import { createApiKey } from '@verity/persistence/api-keys';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http, sms, submission, unique } from '../support/http';
import { SseStream, openStream } from './api-sse';

/**
 * Open streams per tenant and per process. Bounded per key only, a tenant with many keys (20 streams each) could
 * open as many streams in one API process as it had keys to open them with, each polling the log on every heartbeat
 * and every announcement: no bound on the process's memory or its database pool. Now one tenant's keys together hold
 * at most half the process's bound (so another tenant is still served) and all tenants together at most the bound;
 * past either, 429 too-many-streams with Retry-After.
 */
const PER_KEY = 2;
const PER_PROCESS = 5;
/** Half the process's bound, rounded up. */
const PER_TENANT = 3;

let stack: Stack;
const opened: SseStream[] = [];

beforeAll(async () => {
  stack = await Stack.start({
    label: 'stream-tenant-share',
    dispatchers: 0,
    reconcilers: 0,
    env: { MAX_STREAMS_PER_KEY: String(PER_KEY), MAX_STREAMS_PER_PROCESS: String(PER_PROCESS) },
  });
}, 120_000);

afterAll(async () => {
  for (const s of opened) s.abort();
  await stack?.stop();
});

/** An execution of the key's tenant that never settles (no dispatcher runs): a stream of it stays open. */
async function unsettled(key: string): Promise<string> {
  const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
    key,
    body: submission([sms(unique('held'))]),
  });
  expect(created.status).toBe(201);
  return created.body.id;
}

async function open(key: string, executionId: string): Promise<SseStream> {
  const s = await openStream(`${stack.apiUrl}/v1/executions/${executionId}/stream`, key);
  opened.push(s);
  return s;
}

async function refused(key: string, executionId: string): Promise<string> {
  // Opened as a stream: one wrongly let through answers 200 and stays open (a plain read would wait for its end).
  const res = await fetch(`${stack.apiUrl}/v1/executions/${executionId}/stream`, {
    headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream' },
  });
  if (res.status !== 429) await res.body?.cancel();
  expect(res.status).toBe(429);
  expect(res.headers.get('retry-after')).toBe('5');
  const body = (await res.json()) as { type: string; detail: string };
  expect(body.type).toBe('https://verity.dev/problems/too-many-streams');
  return body.detail;
}

describe('SSE: open streams per tenant and per process', () => {
  it("bounds one tenant's keys together, serves another tenant, then bounds all of them; the room comes back", async () => {
    const demoSecond = (await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo', role: 'agent' })).key;
    const otherSecond = (await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo-other', role: 'agent' }))
      .key;
    const demoExecution = await unsettled(DEMO.agent);
    const otherExecution = await unsettled(DEMO.otherAgent);

    // The demo agent key holds its own bound.
    for (let i = 0; i < PER_KEY; i += 1) expect((await open(DEMO.agent, demoExecution)).status).toBe(200);
    expect(await refused(DEMO.agent, demoExecution)).toContain('per key');
    // A second key of the tenant: its first stream is the tenant's last place.
    const last = await open(demoSecond, demoExecution);
    expect(last.status).toBe(200);
    expect(await refused(demoSecond, demoExecution)).toContain(`at most ${PER_TENANT} per tenant`);
    // The tenant's third key has none open of its own, and is refused all the same.
    expect(await refused(DEMO.reviewer, demoExecution)).toContain('per tenant');

    // Another tenant is still served, up to the process's bound.
    for (let i = 0; i < PER_KEY; i += 1) expect((await open(DEMO.otherAgent, otherExecution)).status).toBe(200);
    expect(await refused(otherSecond, otherExecution)).toContain(`at most ${PER_PROCESS} in this API process`);
    expect((await http(stack.apiUrl, 'GET', '/health/live')).status).toBe(200);

    // A stream that closes gives its place back.
    last.abort();
    await last.closed;
    const again = await waitForPlace(otherSecond, otherExecution);
    expect(again.status).toBe(200);
  }, 90_000);
});

/**
 * A stream closed on the client side frees its place on the server a moment later: ask until it is free, however long
 * that takes (the test's timeout bounds it).
 */
function waitForPlace(key: string, executionId: string): Promise<SseStream> {
  return waitFor(
    async () => {
      const s = await open(key, executionId);
      if (s.status !== 200) s.abort();
      return s;
    },
    (s) => s.status === 200,
    Infinity,
    100,
  );
}
