import { DEMO, Stack } from '../support/stack';
import { sms, submission, unique } from '../support/http';

const HEADERS = {
  accept: 'application/json, text/event-stream',
  'content-type': 'application/json',
  'mcp-protocol-version': '2025-03-26',
  authorization: `Bearer ${DEMO.agent}`,
};

/**
 * A submission and a cancel over MCP are never stopped mid-call (a stopped submission leaves its outcome unknown): a
 * `notifications/cancelled` naming one is carried out on the key's calls that change nothing, and that is all. Sent in
 * the same batch as the call it names, it was also handed to that POST's own server, which stopped the call and sent
 * it no answer: the POST was never answered, whatever had been written.
 */
describe('MCP: a state-changing call and its own cancellation in one batch', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'red23-mcp-batch', dispatchers: 0, reconcilers: 0 });
  }, 120_000);
  afterAll(async () => stack?.stop());

  async function post(body: unknown): Promise<{ status: number; text: string }> {
    const res = await fetch(`${stack.apiUrl}/mcp`, {
      method: 'POST',
      headers: HEADERS,
      body: JSON.stringify(body),
      // Far longer than a submission takes: a POST not answered by then is never answered.
      signal: AbortSignal.timeout(15_000),
    });
    return { status: res.status, text: await res.text() };
  }

  const toolCall = (id: number, name: string, args: unknown) => ({
    jsonrpc: '2.0',
    id,
    method: 'tools/call',
    params: { name, arguments: args },
  });

  /** Submits one SMS over MCP (a batch of that call alone) and says the execution's id. */
  async function submitted(reference: string): Promise<string> {
    const created = await post([toolCall(1, 'submit_execution', submission([sms(reference)]))]);
    return /"id":"(exe_[0-9a-z]+)"/.exec(created.text)![1];
  }

  const cancellation = (requestId: number) => ({
    jsonrpc: '2.0',
    method: 'notifications/cancelled',
    params: { requestId, reason: 'changed my mind' },
  });

  it('a submission runs to its end and is answered; the execution is written once', async () => {
    const reference = unique('red23-mcp-batch');
    const answer = await post([toolCall(1, 'submit_execution', submission([sms(reference)])), cancellation(1)]);
    expect(answer.status).toBe(200);
    expect(answer.text).toContain('"id":1');
    expect(answer.text).toContain('Accepted (idempotency key');
    const rows = (await stack.db.dataSource.query(
      `SELECT count(*)::int AS n FROM operations WHERE params->>'client_ref' = $1`,
      [reference],
    )) as { n: number }[];
    expect(rows[0].n).toBe(1);
  }, 60_000);

  it('a cancel runs to its end and is answered', async () => {
    const executionId = await submitted(unique('red23-mcp-batch-cancel'));
    const answer = await post([toolCall(2, 'cancel_execution', { execution_id: executionId }), cancellation(2)]);
    expect(answer.status).toBe(200);
    expect(answer.text).toContain('"id":2');
    expect(answer.text).toContain('Cancel accepted.');
  }, 60_000);

  it('a call that changes nothing is still stopped by it, and the POST answered with the cancellation', async () => {
    const executionId = await submitted(unique('red23-mcp-batch-read'));
    const answer = await post([
      toolCall(3, 'wait_for_execution', { execution_id: executionId, timeout_seconds: 50 }),
      cancellation(3),
    ]);
    expect(answer.status).toBe(200);
    expect(answer.text).toContain('"id":3');
    expect(answer.text).toContain('-32800');
  }, 60_000);
});
