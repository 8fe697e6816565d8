import { DEMO, Stack, freePort } from '../support/stack';
import { charge, continuedRequest, unique } from '../support/http';

/**
 * An MCP POST that arrives once the API has begun to stop (its body finished after the signal, or a kept-alive
 * connection). Served, its calls back into the API could meet a listener already closed, and the agent read "No answer
 * from Verity (ECONNREFUSED)" for a submission it cannot tell was made. It is refused whole: 503 with Retry-After,
 * nothing in it carried out, and the API still exits 0.
 */
describe('MCP POST arriving while the API stops', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'mcp-late-post', dispatchers: 0, reconcilers: 0 });
  }, 120_000);
  afterAll(async () => stack?.stop());

  it('is refused 503 (Retry-After), carries out nothing; exit 0', async () => {
    const port = await freePort();
    const api = await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1' });
    const reference = unique('late-mcp');
    const body = JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: {
        name: 'submit_execution',
        arguments: {
          agent_id: 'mcp-late',
          intent: `charge ${reference}`,
          operations: [charge(reference)],
        },
      },
    });
    // The API has read the headers: the request is under way before the signal.
    const request = await continuedRequest(
      api,
      port,
      `POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${DEMO.agent}\r\n` +
        `Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n` +
        `MCP-Protocol-Version: 2025-03-26\r\nContent-Length: ${Buffer.byteLength(body)}\r\n`,
    );
    request.write(body.slice(0, 10));
    api.child.kill('SIGTERM');
    // It logs "shutting down" in the same turn as it begins to stop the MCP waits: only then does the body end.
    await request.until('the API saying it stops', () => api.output.join('').includes('"shutting down"'));
    request.write(body.slice(10));
    await request.until('the answer', () => {
      const answer = request.answer();
      const end = answer.indexOf('\r\n\r\n');
      if (end < 0) return false;
      const length = /\r\ncontent-length: (\d+)\r\n/i.exec(answer.slice(0, end + 2));
      return length !== null && Buffer.byteLength(answer.slice(end + 4)) >= Number(length[1]);
    });
    await request.end();
    const code = await api.exited;
    const answer = request.answer();
    const head = answer.slice(0, answer.indexOf('\r\n\r\n'));
    expect(head).toMatch(/^HTTP\/1\.1 503 /);
    expect(head).toMatch(/\r\nretry-after: \d+\r\n/i);
    expect(head).toMatch(/\r\ncontent-type: application\/problem\+json/i);
    const problem = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as { type: string; detail: string };
    expect(problem.type).toBe('https://verity.dev/problems/api-stopping');
    expect(problem.detail).toContain('nothing in the request was carried out');
    const rows = (await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM executions WHERE intent = $1`, [
      `charge ${reference}`,
    ])) as { n: number }[];
    expect(rows).toEqual([{ n: 0 }]);
    expect(code).toBe(0);
  }, 60_000);
});
