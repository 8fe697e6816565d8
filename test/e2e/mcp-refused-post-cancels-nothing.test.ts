import { DEMO, Stack } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';

/**
 * A POST to /mcp that the transport refuses whole (a batch of more than 100 messages, an Accept without
 * text/event-stream, a protocol version it does not speak) carries nothing out: its answer says so. The
 * `notifications/cancelled` such a POST held were carried out all the same — before the transport looked at it — and
 * stopped the key's requests they named, on every API process, while the client was told its POST was refused.
 */
describe('MCP: a POST the transport refuses cancels nothing', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'mcp-refused-cancels', reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  const MCP_ACCEPT = 'application/json, text/event-stream';

  async function heldExecution(): Promise<string> {
    const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('refused-cancel'), { requires_approval: true })]),
    });
    expect(created.status).toBe(201);
    return created.body.id;
  }

  /**
   * A wait_for_execution with JSON-RPC id `id`, `seconds` long; resolves once the server is waiting (its first progress
   * notification arrived). `answer` is the JSON-RPC answer to the call.
   */
  async function startWait(executionId: string, id: string, seconds: number) {
    const res = await fetch(`${stack.apiUrl}/mcp`, {
      method: 'POST',
      headers: { authorization: `Bearer ${DEMO.agent}`, 'content-type': 'application/json', accept: MCP_ACCEPT },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id,
        method: 'tools/call',
        params: {
          name: 'wait_for_execution',
          arguments: { execution_id: executionId, timeout_seconds: seconds },
          _meta: { progressToken: id },
        },
      }),
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    const messages = () =>
      [...text.matchAll(/^data: (.*)$/gm)].map((m) => JSON.parse(m[1]) as { method?: string; id?: unknown });
    while (!messages().some((m) => m.method === 'notifications/progress')) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`the wait ended before it was waiting: ${text}`);
      text += decoder.decode(value, { stream: true });
    }
    const answer = (async () => {
      for (;;) {
        const found = messages().find((m) => m.id === id);
        if (found)
          return found as { result?: { structuredContent?: { timed_out?: boolean } }; error?: { code: number } };
        const { value, done } = await reader.read();
        if (done) throw new Error(`no answer to the wait: ${text}`);
        text += decoder.decode(value, { stream: true });
      }
    })();
    return { answer };
  }

  const cancellation = (requestId: string) => ({
    jsonrpc: '2.0',
    method: 'notifications/cancelled',
    params: { requestId, reason: 'test' },
  });

  it('a batch over 100 messages, an Accept without text/event-stream, an unknown protocol version: refused, the wait runs on', async () => {
    const executionId = await heldExecution();
    const waitId = unique('wait');
    const { answer } = await startWait(executionId, waitId, 8);

    const tooMany = await http<{ error?: { code: number } }>(stack.apiUrl, 'POST', '/mcp', {
      key: DEMO.agent,
      headers: { accept: MCP_ACCEPT },
      body: [cancellation(waitId), ...Array.from({ length: 100 }, (_, i) => cancellation(`other-${i}`))],
    });
    expect([tooMany.status, tooMany.body.error?.code]).toEqual([400, -32600]);
    const notAcceptable = await http(stack.apiUrl, 'POST', '/mcp', {
      key: DEMO.agent,
      headers: { accept: 'application/json' },
      body: cancellation(waitId),
    });
    expect(notAcceptable.status).toBe(406);
    const unknownVersion = await http(stack.apiUrl, 'POST', '/mcp', {
      key: DEMO.agent,
      headers: { accept: MCP_ACCEPT, 'mcp-protocol-version': '1999-01-01' },
      body: cancellation(waitId),
    });
    expect(unknownVersion.status).toBe(400);

    // Not cancelled (-32800): the wait answers at its own end, with the current state.
    const answered = await answer;
    expect(answered.error).toBeUndefined();
    expect(answered.result?.structuredContent?.timed_out).toBe(true);
  });

  it('a cancellation the transport takes still stops the wait it names', async () => {
    const executionId = await heldExecution();
    const waitId = unique('wait');
    const { answer } = await startWait(executionId, waitId, 45);
    const taken = await http(stack.apiUrl, 'POST', '/mcp', {
      key: DEMO.agent,
      headers: { accept: MCP_ACCEPT },
      body: cancellation(waitId),
    });
    expect(taken.status).toBe(202);
    expect((await answer).error?.code).toBe(-32800);
  });
});
