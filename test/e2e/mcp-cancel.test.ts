import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { createApiKey } from '@verity/persistence/api-keys';
import { Stack, waitFor } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';

/**
 * A client that cancels a tool call over stateless Streamable HTTP: the MCP client does not close the request's
 * response, it POSTs `notifications/cancelled` (a new request, to whichever API process). That must stop the call it
 * names — here a wait_for_execution holding the key's only stream — whichever process it lands on, and within seconds,
 * not when the wait's own timeout runs out. Only that key's call of that id is touched.
 */
describe('MCP cancellation over stateless HTTP', () => {
  let stack: Stack;
  const clients: Client[] = [];
  const transportsOf = new Map<StreamableHTTPClientTransport, Client>();
  const lastToolCallId = new Map<Client, number>();

  beforeAll(async () => {
    // One stream per key: while a wait holds it, the key's own stream is refused (429), so the slot shows the wait.
    stack = await Stack.start({ label: 'mcp-cancel', apis: 2, env: { MAX_STREAMS_PER_KEY: '1' } });
  }, 120_000);

  afterAll(async () => {
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
    await stack?.stop();
  });

  const agentKey = async () =>
    (await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo', role: 'agent', label: unique('mcp-cancel') }))
      .key;

  /** A client of the first API process; its notifications (the cancellation among them) go to `notifyTo`. */
  async function client(key: string, notifyTo: string): Promise<Client> {
    const base = stack.apiUrls[0];
    const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${key}` } },
      fetch: (input, init) => {
        const body = typeof init?.body === 'string' ? init.body : '';
        const message = body ? (JSON.parse(body) as { method?: string; id?: number }) : {};
        if (message.method === 'tools/call') lastToolCallId.set(transportsOf.get(transport)!, message.id!);
        const url = body.includes('"notifications/cancelled"') ? `${notifyTo}/mcp` : String(input);
        return fetch(url, init);
      },
    });
    const c = new Client({ name: 'mcp-cancel-e2e', version: '1.0.0' });
    transportsOf.set(transport, c);
    await c.connect(transport);
    clients.push(c);
    return c;
  }

  async function heldExecution(key: string): Promise<string> {
    const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key,
      body: submission([charge(unique('mcp-cancel'), { requires_approval: true })]),
    });
    expect(created.status).toBe(201);
    return created.body.id;
  }

  async function streamStatus(key: string, id: string): Promise<number> {
    const res = await fetch(`${stack.apiUrl}/v1/executions/${id}/stream`, {
      headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream' },
    });
    await res.body?.cancel().catch(() => undefined);
    return res.status;
  }

  /** Starts a long wait; resolves once the server holds its stream (its first progress notification arrived). */
  async function startWait(c: Client, id: string) {
    const controller = new AbortController();
    let streaming!: () => void;
    const held = new Promise<void>((resolve) => (streaming = resolve));
    const call = c
      .callTool(
        { name: 'wait_for_execution', arguments: { execution_id: id, timeout_seconds: 45 } },
        CallToolResultSchema,
        {
          signal: controller.signal,
          timeout: 58_000,
          onprogress: () => streaming(),
        },
      )
      .then(
        () => 'answered',
        (error: Error) => error.message,
      );
    await held;
    return { controller, call, requestId: lastToolCallId.get(c) };
  }

  it.each([
    ['the same API process', 0],
    ['another API process', 1],
  ])('a cancelled wait_for_execution releases its stream at once, the cancellation sent to %s', async (_, to) => {
    const key = await agentKey();
    const id = await heldExecution(key);
    const c = await client(key, stack.apiUrls[to]);
    const { controller, call } = await startWait(c, id);
    expect(await streamStatus(key, id)).toBe(429); // the wait holds the key's one stream
    controller.abort('the agent gave up');
    expect(await call).toMatch(/abort|gave up/i);
    // Well inside the wait's 45 s: the server stopped the wait and closed its stream.
    await waitFor(
      () => streamStatus(key, id),
      (status) => status === 200,
      10_000,
      200,
    );
  });

  it('a cancellation names one request of one key: another key’s, or another id, stops nothing', async () => {
    const [mine, other] = [await agentKey(), await agentKey()];
    const [myExecution, otherExecution] = [await heldExecution(mine), await heldExecution(other)];
    const [myClient, otherClient] = [await client(mine, stack.apiUrls[0]), await client(other, stack.apiUrls[0])];
    const waiting = await startWait(myClient, myExecution);
    const otherWaiting = await startWait(otherClient, otherExecution);
    const cancel = async (key: string, requestId: unknown) => {
      const answer = await http(stack.apiUrls[1], 'POST', '/mcp', {
        key,
        headers: { accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' },
        body: { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId, reason: 'test' } },
      });
      expect(answer.status).toBe(202);
    };
    // Both waits are their client's request 1 (initialize was 0). Naming mine with the other key, another id of my
    // key, or my id as a string: none is my request.
    expect([waiting.requestId, otherWaiting.requestId]).toEqual([1, 1]);
    await cancel(other, 7);
    await cancel(mine, 7);
    await cancel(mine, '1');
    // Then the other key's own request: passed on after the three above, on the same channel, so once the other wait
    // has let go of its stream, the three have been heard too.
    await cancel(other, 1);
    await waitFor(
      () => streamStatus(other, otherExecution),
      (status) => status === 200,
      10_000,
      200,
    );
    let settled = false;
    void waiting.call.then(() => (settled = true));
    expect(await streamStatus(mine, myExecution)).toBe(429);
    expect(settled).toBe(false);
    expect(await otherWaiting.call).toMatch(/cancelled/);
    waiting.controller.abort('done');
    await waiting.call;
  });
  it('another key sending this client’s Mcp-Session-Id cancels nothing of it', async () => {
    // A session id is no secret (it travels in headers, logs, proxies): another key that learns it and names the
    // client's request 1 in that session must stop nothing — the key scopes a cancellation, the session only narrows it.
    const [mine, intruder, witnessKey] = [await agentKey(), await agentKey(), await agentKey()];
    const [execution, witnessExecution] = [await heldExecution(mine), await heldExecution(witnessKey)];
    const mineClient = await client(mine, stack.apiUrls[0]);
    const witness = await client(witnessKey, stack.apiUrls[0]);
    const waiting = await startWait(mineClient, execution);
    const witnessWaiting = await startWait(witness, witnessExecution);
    expect([waiting.requestId, witnessWaiting.requestId]).toEqual([1, 1]);
    const session = [...transportsOf].find(([, c]) => c === mineClient)![0].sessionId;
    expect(session).toMatch(/^[0-9a-f-]{36}$/);
    for (const to of stack.apiUrls) {
      const answer = await http(to, 'POST', '/mcp', {
        key: intruder,
        headers: {
          accept: 'application/json, text/event-stream',
          'mcp-protocol-version': '2025-06-18',
          'mcp-session-id': session!,
        },
        body: { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 1, reason: 'not yours' } },
      });
      expect(answer.status).toBe(202);
    }
    // The witness's own cancellation, sent after them on the same channel: once its wait let go, they were heard.
    await witness.notification({ method: 'notifications/cancelled', params: { requestId: 1, reason: 'test' } });
    await waitFor(
      () => streamStatus(witnessKey, witnessExecution),
      (status) => status === 200,
      10_000,
      200,
    );
    let settled = false;
    void waiting.call.then(() => (settled = true));
    expect(await streamStatus(mine, execution)).toBe(429);
    expect(settled).toBe(false);
    waiting.controller.abort('done');
    await waiting.call;
  });
  it('clients sharing a key: one’s cancellation of its request 1 does not stop the other’s request 1', async () => {
    // Each client's ids are its own (1, 2, 3…), so two clients of one key send the same ids. A cancellation is scoped
    // to the session (Mcp-Session-Id) of the client that sends it.
    const [shared, witnessKey] = [await agentKey(), await agentKey()];
    const [execution, witnessExecution] = [await heldExecution(shared), await heldExecution(witnessKey)];
    const [a, b] = [await client(shared, stack.apiUrls[0]), await client(shared, stack.apiUrls[0])];
    const witness = await client(witnessKey, stack.apiUrls[0]);
    const waiting = await startWait(a, execution);
    const witnessWaiting = await startWait(witness, witnessExecution);
    expect([waiting.requestId, witnessWaiting.requestId]).toEqual([1, 1]);
    const cancelOne = (c: Client) =>
      c.notification({ method: 'notifications/cancelled', params: { requestId: 1, reason: 'test' } });
    // B cancels its own request 1 (a late cancellation of a call that has ended, as a client may send).
    await cancelOne(b);
    // Then the witness cancels its own: carried out after B's, so once its wait has let go of its stream, B's
    // cancellation has been carried out too.
    await cancelOne(witness);
    await waitFor(
      () => streamStatus(witnessKey, witnessExecution),
      (status) => status === 200,
      10_000,
      200,
    );
    let settled = false;
    void waiting.call.then(() => (settled = true));
    expect(await streamStatus(shared, execution)).toBe(429);
    expect(settled).toBe(false);
    expect(await witnessWaiting.call).toMatch(/cancelled/);
    // A's own cancellation still stops it.
    await cancelOne(a);
    await waitFor(
      () => streamStatus(shared, execution),
      (status) => status === 200,
      10_000,
      200,
    );
    expect(await waiting.call).toMatch(/cancelled/);
  });
});
