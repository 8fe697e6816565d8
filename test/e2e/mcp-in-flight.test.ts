import { DEMO, Stack, waitFor } from '../support/stack';
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
    // Asked again until then, however long that takes (the test's timeout bounds it).
    const refused = await waitFor(
      () => listConnectors(1),
      (seen) => seen.status === 429,
      Infinity,
      50,
    );
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

/**
 * A wait follows the execution's stream, and a key may hold MAX_STREAMS_PER_KEY streams: a key's waits in flight in
 * one API process are bounded by that number, not by its MCP requests (100 by default, against 20 streams), past which
 * the waits polled, every second each, spending the key's request budget.
 */
describe('MCP: waits in flight per key', () => {
  const STREAMS = 2;
  let api = '';
  beforeAll(async () => {
    api = await stack.startApi({ MAX_STREAMS_PER_KEY: String(STREAMS), MAX_MCP_REQUESTS_PER_KEY: '10' });
  }, 60_000);
  const postTo = (body: unknown, key: string = DEMO.agent) =>
    http(api, 'POST', '/mcp', { key, rawBody: JSON.stringify(body), headers: HEADERS });
  const wait = (id: number, executionId: string, timeoutSeconds = 50) =>
    toolCall(id, 'wait_for_execution', { execution_id: executionId, timeout_seconds: timeoutSeconds });

  it('refuses a batch of more waits than a key may hold streams 400 (-32600, split it), and carries out none', async () => {
    const res = await postTo(
      Array.from({ length: STREAMS + 1 }, (_, i) => wait(i + 1, 'exe_01nosuchexecution0000000')),
    );
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      jsonrpc: '2.0',
      id: null,
      error: {
        code: -32600,
        message: expect.stringContaining(`carries ${STREAMS + 1} wait_for_execution calls; at most ${STREAMS}`),
      },
    });
    expect((res.body as { error: { message: string } }).error.message).toMatch(/split it/);
  });

  it('refuses a wait past the streams the key may hold 429, while its other calls are served; room comes back', async () => {
    const created = await http<{ id: string }>(api, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([sms(unique('waits'))]),
    });
    expect(created.status).toBe(201);
    // No dispatcher runs: the execution never settles, so each wait holds its place until it is cancelled.
    const held = Array.from({ length: STREAMS }, (_, i) => postTo(wait(200 + i, created.body.id)));
    // Asked again until the held waits are counted, however long that takes (the test's timeout bounds it).
    const refused = await waitFor(
      () => postTo(wait(300, created.body.id, 1)),
      (seen) => seen.status === 429,
      Infinity,
      50,
    );
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).not.toBeNull();
    expect(refused.body).toMatchObject({
      type: 'https://verity.dev/problems/too-many-mcp-requests',
      detail: expect.stringContaining(`at most ${STREAMS} wait_for_execution calls of one key`),
    });
    // The key's other calls are still served.
    expect((await postTo(toolCall(301, 'list_connectors', {}))).status).toBe(200);
    for (let i = 0; i < STREAMS; i += 1) {
      const cancelled = await postTo({
        jsonrpc: '2.0',
        method: 'notifications/cancelled',
        params: { requestId: 200 + i },
      });
      expect(cancelled.status).toBe(202);
    }
    for (const answer of await Promise.all(held)) expect(answer.status).toBe(200);
    expect((await postTo(wait(302, created.body.id, 1))).status).toBe(200);
  }, 60_000);

  /** A wait POSTed with a signal: its status once the answer's head came (the wait's stream of events keeps it open). */
  async function heldWait(id: number, executionId: string, signal: AbortSignal) {
    const res = await fetch(`${api}/mcp`, {
      method: 'POST',
      headers: { ...HEADERS, authorization: `Bearer ${DEMO.agent}` },
      body: JSON.stringify(wait(id, executionId)),
      signal,
    });
    // The body is read until the abort: the client leaves mid-wait, its connection closed.
    const read = res.text().catch(() => undefined);
    return { status: res.status, read };
  }

  /** Polls, 50 ms apart, until the condition holds (the test's timeout bounds it); what it saw then. */
  const until = <T>(probe: () => Promise<T>, done: (seen: T) => boolean): Promise<T> =>
    waitFor(probe, done, Infinity, 50);

  it('gives a wait back on every exit: a client leaving mid-wait, and a POST the transport refuses after admission, each more times than the bound', async () => {
    const created = await http<{ id: string }>(api, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([sms(unique('waits-left'))]),
    });
    expect(created.status).toBe(201);
    let id = 400;
    // The client leaves mid-wait, with the key's waits all held, more times than the key may hold waits: had a wait
    // left behind kept its place, a round would find none.
    for (let round = 0; round < STREAMS + 1; round += 1) {
      const leave = new AbortController();
      const held: { status: number; read: Promise<unknown> }[] = [];
      for (let i = 0; i < STREAMS; i += 1) {
        // The previous round's waits are given back as their connections close: admitted once they have been.
        held.push(
          await until(
            () => heldWait((id += 1), created.body.id, leave.signal),
            (seen) => seen.status !== 429,
          ),
        );
      }
      expect(held.map((h) => h.status)).toEqual(Array.from({ length: STREAMS }, () => 200));
      // Every place is held now.
      expect((await postTo(wait((id += 1), created.body.id, 1))).status).toBe(429);
      leave.abort();
      await Promise.all(held.map((h) => h.read));
    }
    // A POST admitted (its wait counted) and then refused by the transport (a protocol version it does not take).
    for (let round = 0; round < STREAMS + 1; round += 1) {
      const refused = await until(
        () =>
          http(api, 'POST', '/mcp', {
            key: DEMO.agent,
            rawBody: JSON.stringify(wait((id += 1), created.body.id, 1)),
            headers: { ...HEADERS, 'mcp-protocol-version': '1999-01-01' },
          }),
        (seen) => seen.status !== 429,
      );
      expect(refused.status).toBe(400);
    }
    // The room is all there: a wait is taken (answered at its own timeout, 1 s).
    const taken = await until(
      () => postTo(wait((id += 1), created.body.id, 1)),
      (seen) => seen.status !== 429,
    );
    expect(taken.status).toBe(200);
  }, 120_000);
});
