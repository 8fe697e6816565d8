import { DEMO, RunningApp, Stack, freePort } from '../support/stack';
import { type RawHttpAnswer, continuedRequest, unique, wholeAnswer } from '../support/http';

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

  /**
   * A POST to `path` whose headers (with `Expect: 100-continue`) are sent now and its body only when `finish` is
   * called: the API has the request under way (100 Continue, or an answer at once to headers it refuses), and the body
   * can be made to end after the API began to stop. `finish(split)` sends the rest of the body from byte `split` on
   * (the bytes before it are sent by `begin(split)`), and resolves with the whole answer.
   */
  async function lateRequest(
    port: number,
    api: RunningApp,
    request: { path?: string; headers?: Record<string, string>; body: string | Buffer },
  ) {
    const body = typeof request.body === 'string' ? Buffer.from(request.body) : request.body;
    const extra = Object.entries(request.headers ?? {})
      .map(([name, value]) => `${name}: ${value}\r\n`)
      .join('');
    const sent = await continuedRequest(
      api,
      port,
      `POST ${request.path ?? '/mcp'} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${DEMO.agent}\r\n` +
        `Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n` +
        `MCP-Protocol-Version: 2025-03-26\r\n${extra}Content-Length: ${body.length}\r\n`,
      { answeredAtOnce: true },
    );
    // The API has read the headers: the request is under way, or was answered at once (its headers refused).
    const early = wholeAnswer(sent.answerBytes());
    return {
      begin: (split: number) => {
        if (!early) sent.write(body.subarray(0, split));
      },
      finish: async (split: number): Promise<RawHttpAnswer> => {
        let answer = early;
        if (!answer) {
          sent.write(body.subarray(split));
          await sent.until('the answer', () => (answer = wholeAnswer(sent.answerBytes())) !== null);
        }
        await sent.end();
        return answer!;
      },
    };
  }

  /** The API under test, on a port of its own, and how to make it begin to stop. */
  async function stoppingApi() {
    const port = await freePort();
    const api = await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1' });
    return {
      port,
      api,
      /** SIGTERM, and the API's word that it stops: it logs "shutting down" in the turn it begins to stop the MCP waits. */
      stop: async () => {
        api.child.kill('SIGTERM');
        while (!api.output.join('').includes('"shutting down"')) {
          if (api.child.exitCode !== null) throw new Error('the API exited before saying it stops');
          await new Promise((r) => setTimeout(r, 20));
        }
      },
    };
  }

  const submission = (reference: string, agentId = 'mcp-late') => ({
    name: 'submit_execution',
    arguments: {
      agent_id: agentId,
      intent: `charge ${reference}`,
      operations: [
        {
          key: 'charge',
          connector: 'sandbox.payments',
          action: 'charge',
          params: { amount: 1250, currency: 'EUR', reference },
        },
      ],
    },
  });

  it('is refused 503 (Retry-After), carries out nothing; exit 0', async () => {
    const { port, api, stop } = await stoppingApi();
    const reference = unique('late-mcp');
    const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: submission(reference) });
    const late = await lateRequest(port, api, { body });
    late.begin(10);
    await stop();
    const { head, body: answer } = await late.finish(10);
    const code = await api.exited;
    expect(head).toMatch(/^HTTP\/1\.1 503 /);
    expect(head).toMatch(/\r\nretry-after: \d+(\r\n|$)/i);
    expect(head).toMatch(/\r\ncontent-type: application\/problem\+json/i);
    const problem = JSON.parse(answer) as { type: string; detail: string };
    expect(problem.type).toBe('https://verity.dev/problems/api-stopping');
    expect(problem.detail).toContain('nothing in the request was carried out');
    const rows = (await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM executions WHERE intent = $1`, [
      `charge ${reference}`,
    ])) as { n: number }[];
    expect(rows).toEqual([{ n: 0 }]);
    expect(code).toBe(0);
  }, 60_000);

  /**
   * Hostile ids and strings in a POST that arrives while the API stops — as the JSON-RPC id, as a tool's execution id,
   * as members and values of a submission, in the session header, in the query: each answer is the documented 503 or
   * a 4xx the client can read (a JSON-RPC error or a problem), never a 500 or a call carried out; nothing is written,
   * and the API still exits 0.
   */
  it('refuses hostile ids and strings sent as it stops: 503 or a clear 4xx, never a 500, nothing written; exit 0', async () => {
    const TABLES = ['executions', 'operations', 'events', 'admin_changes', 'webhook_endpoints'];
    const counts = async () => {
      const out: Record<string, number> = {};
      for (const table of TABLES) {
        const [row] = (await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM ${table}`)) as { n: number }[];
        out[table] = row.n;
      }
      return out;
    };
    const call = (id: unknown, params: unknown) => JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params });
    const read = (executionId: string, id: unknown = 1) =>
      call(id, { name: 'get_execution', arguments: { execution_id: executionId } });
    const long = 'x'.repeat(10_000);
    const reference = unique('late-hostile');
    const CASES: [string, { path?: string; headers?: Record<string, string>; body: string | Buffer }][] = [
      ['an execution id with a NUL', { body: read('exe\u0000x') }],
      ['an execution id "%00"', { body: read('%00') }],
      ['an execution id of a lone surrogate (escaped)', { body: read('\ud800') }],
      [
        'an execution id of a lone surrogate (its UTF-8 bytes)',
        {
          body: Buffer.concat([
            Buffer.from('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_execution",'),
            Buffer.from('"arguments":{"execution_id":"exe'),
            Buffer.from([0xed, 0xa0, 0x80]),
            Buffer.from('"}}}'),
          ]),
        },
      ],
      ['an execution id and a request id "__proto__"', { body: read('__proto__', '__proto__') }],
      ['an execution id and a request id of 10 kB', { body: read(long, long) }],
      ['an execution id of path traversal', { body: read('../../v1/executions') }],
      ['an escaped execution id of path traversal', { body: read('..%2F..%2Fv1%2Fexecutions') }],
      [
        'a wait on an execution id "__proto__"',
        { body: call(2, { name: 'wait_for_execution', arguments: { execution_id: '__proto__', timeout_seconds: 1 } }) },
      ],
      [
        'a submission by an agent "__proto__" with a "__proto__" member',
        {
          body: call(3, {
            name: 'submit_execution',
            // A computed key: an own member named "__proto__", as JSON sends it.
            arguments: { ...submission(reference, '__proto__').arguments, ['__proto__']: { admin: true } },
          }),
        },
      ],
      ['a submission by an agent with a NUL', { body: call(4, submission(reference, 'agent\u0000x')) }],
      ['a submission whose intent is 10 kB', { body: call(5, { ...submission(reference), intent: long }) }],
      ['a session header "__proto__"', { headers: { 'mcp-session-id': '__proto__' }, body: read('exe_none') }],
      ['a session header "%00"', { headers: { 'mcp-session-id': '%00' }, body: read('exe_none') }],
      ['a session header of path traversal', { headers: { 'mcp-session-id': '../../mcp' }, body: read('exe_none') }],
      ['a session header of 10 kB', { headers: { 'mcp-session-id': long }, body: read('exe_none') }],
      ['a query "__proto__" with a NUL', { path: '/mcp?__proto__=%00', body: read('exe_none') }],
      ['a query with a lone surrogate', { path: '/mcp?x=%ED%A0%80', body: read('exe_none') }],
      ['a path traversal after /mcp', { path: '/mcp/..%2F..%2Fv1%2Fexecutions', body: read('exe_none') }],
    ];
    const before = await counts();
    const { port, api, stop } = await stoppingApi();
    const late = [];
    for (const [name, request] of CASES) late.push({ name, request: await lateRequest(port, api, request) });
    for (const { request } of late) request.begin(10);
    await stop();
    const wrong: unknown[] = [];
    for (const { name, request } of late) {
      const { head, body } = await request.finish(10);
      const status = Number(/^HTTP\/1\.1 (\d{3}) /.exec(head)?.[1]);
      const type = /\r\ncontent-type: ([^;\r]+)/i.exec(head)?.[1]?.toLowerCase();
      type Parsed = { type?: string; status?: number; error?: { code?: number } } | null;
      let parsed: Parsed;
      try {
        parsed = JSON.parse(body) as Parsed;
      } catch {
        parsed = null;
      }
      const stopping =
        status === 503 &&
        type === 'application/problem+json' &&
        /\r\nretry-after: \d+(\r\n|$)/i.test(head) &&
        parsed?.type === 'https://verity.dev/problems/api-stopping';
      const refused =
        status >= 400 &&
        status < 500 &&
        ((type === 'application/problem+json' && parsed?.status === status) ||
          (type === 'application/json' && typeof parsed?.error?.code === 'number'));
      if (!stopping && !refused) wrong.push([name, status, type, body.slice(0, 200)]);
    }
    const code = await api.exited;
    expect(wrong).toEqual([]);
    expect(await counts()).toEqual(before);
    expect(code).toBe(0);
  }, 120_000);
});
