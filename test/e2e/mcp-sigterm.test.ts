import { DEMO, Stack, freePort, waitFor } from '../support/stack';
import { http, sms, submission, unique } from '../support/http';

const HEADERS = {
  accept: 'application/json, text/event-stream',
  'content-type': 'application/json',
  'mcp-protocol-version': '2025-03-26',
};

/**
 * SIGTERM while MCP waits are in flight on the API. A wait changes nothing and runs for up to 50 s: the API ended the
 * stream it followed, the wait tried the API again as it closed, and answered "No answer from Verity (… ECONNREFUSED)"
 * though the API had been there to read the state. Now each wait is stopped first, reads the current state while the
 * API still answers, and says the server is stopping; the API exits 0 well within its grace.
 */
describe('MCP waits in flight at SIGTERM', () => {
  let stack: Stack;
  beforeAll(async () => {
    // No dispatcher: the execution never settles, so every wait runs until something ends it.
    stack = await Stack.start({ label: 'mcp-sigterm', dispatchers: 0, reconcilers: 0 });
  }, 120_000);
  afterAll(async () => stack?.stop());

  it('answer with the current state (stopped: true) before the API stops, which exits 0', async () => {
    const waits = 2;
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    // As many places as waits: a further POST refused 429 shows every wait is in flight.
    const api = await stack.startApp('api', {
      PORT: String(port),
      HOST: '127.0.0.1',
      MAX_MCP_REQUESTS_PER_KEY: String(waits),
    });
    const created = await http<{ id: string; status: string }>(url, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([sms(unique('sigterm'))]),
    });
    expect(created.status).toBe(201);
    const post = (body: unknown) =>
      http(url, 'POST', '/mcp', { key: DEMO.agent, rawBody: JSON.stringify(body), headers: HEADERS });
    const answers = Array.from({ length: waits }, (_, i) =>
      post({
        jsonrpc: '2.0',
        id: i + 1,
        method: 'tools/call',
        params: { name: 'wait_for_execution', arguments: { execution_id: created.body.id, timeout_seconds: 50 } },
      }),
    );
    await waitFor(
      async () =>
        (
          await post({
            jsonrpc: '2.0',
            id: 99,
            method: 'tools/call',
            params: { name: 'list_connectors', arguments: {} },
          })
        ).status,
      (status) => status === 429,
      20_000,
      50,
    );

    api.child.kill('SIGTERM');
    // 0: the stop finished; waits held for their 50 s would have met the forced exit 1 at the grace.
    expect(await api.exited).toBe(0);
    for (const answer of await Promise.all(answers)) {
      expect(answer.status).toBe(200);
      const data = answer.text.split('\n').find((line) => line.startsWith('data: '));
      const message = JSON.parse(data!.slice('data: '.length)) as {
        result: { isError?: boolean; content: { text: string }[]; structuredContent: Record<string, unknown> };
      };
      expect(message.result.isError).toBeFalsy();
      expect(message.result.content[0].text).toMatch(/^The MCP server is stopping/);
      expect(message.result.content[0].text).toContain('never submit the execution again');
      expect(message.result.structuredContent).toMatchObject({
        stopped: true,
        timed_out: false,
        execution: { id: created.body.id, status: created.body.status },
        report: { settled: false },
      });
    }
  }, 120_000);
});
