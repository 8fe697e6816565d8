import { DEMO, Stack } from '../support/stack';
import { http, sms, submission, unique } from '../support/http';

/**
 * Red team (hostile pass 4): the MCP SDK's transport looked for `application/json` and `text/event-stream` in Accept as
 * substrings, case-sensitively. Media types are case-insensitive (RFC 9110, section 8.3.1), so
 * `Application/JSON, Text/Event-Stream` was refused 406; `q=0` means "not acceptable" (section 12.4.2), yet
 * `text/event-stream;q=0` was taken, and the call carried out (an answer the client had said it cannot read).
 */
const NOT_ACCEPTABLE = 'Not Acceptable: Client must accept both application/json and text/event-stream';

describe('MCP: the Accept header', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'mcpaccept', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  const executions = async () =>
    ((await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM executions`)) as { n: number }[])[0].n;

  const post = (accept: string, body: unknown) =>
    http<{ error?: { code: number; message: string } } | string>(stack.apiUrl, 'POST', '/mcp', {
      key: DEMO.agent,
      headers: { accept, 'mcp-protocol-version': '2025-06-18' },
      body,
    });

  const submit = () => ({
    jsonrpc: '2.0',
    id: 3,
    method: 'tools/call',
    params: { name: 'submit_execution', arguments: submission([sms(unique('accept'))]) },
  });

  it.each([
    'Application/JSON, Text/Event-Stream',
    'TEXT/EVENT-STREAM, APPLICATION/JSON',
    'application/json;q=0.5, text/event-stream;q=1',
    'application/json ; charset=utf-8 , text/event-stream;q=0.001',
  ])('takes %s (media types are case-insensitive, any q above 0 accepts)', async (accept) => {
    const res = await post(accept, { jsonrpc: '2.0', id: 1, method: 'tools/list' });
    expect({ accept, status: res.status }).toEqual({ accept, status: 200 });
    expect(res.text).toContain('submit_execution');
  });

  for (const accept of [
    'application/json, text/event-stream;q=0',
    'application/json;q=0, text/event-stream',
    'application/json, text/event-stream;Q=0.000',
    'application/json, text/event-stream; q=0.0',
    'application/json-seq, text/event-streams',
    'application/json',
    '*/*',
    'application/json;q=abc, text/event-stream',
    `application/json;q=${'9'.repeat(4000)}, text/event-stream`,
    'application/json, text/event-stream;q="0"',
  ]) {
    it(`refuses ${accept.slice(0, 60)} 406 as before, carrying out nothing`, async () => {
      const before = await executions();
      const res = await post(accept, submit());
      expect({ accept, status: res.status }).toEqual({ accept, status: 406 });
      expect(res.body).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32000 } });
      expect((res.body as { error: { message: string } }).error.message).toMatch(
        new RegExp(`^${NOT_ACCEPTABLE.replace(/[/]/g, '\\/')}`),
      );
      expect(await executions()).toBe(before);
    });
  }

  it('a submission with an Accept in other letter case is carried out', async () => {
    const before = await executions();
    const res = await post('Application/Json, Text/Event-Stream', submit());
    expect(res.status).toBe(200);
    expect(await executions()).toBe(before + 1);
  });
});
