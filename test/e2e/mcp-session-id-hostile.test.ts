import { DEMO, Stack } from '../support/stack';
import { rawExchange } from '../support/http';

/**
 * Mcp-Session-Id is the client's to send: whatever it sends — longer than any id the server gives, with control
 * characters, bytes past ASCII, on an `initialize` — is answered, or refused with a 4xx that says so; never a 500.
 * (Another key's session id cancels nothing of that key: mcp-cancel.)
 */
describe('MCP: hostile Mcp-Session-Id values', () => {
  let stack: Stack;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'mcpsession', dispatchers: 0, reconcilers: 0 });
  }, 60_000);
  afterAll(async () => {
    await stack?.stop();
  });

  const list = JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/list' });
  const initialize = JSON.stringify({
    jsonrpc: '2.0',
    id: 0,
    method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'hostile', version: '1' } },
  });
  const cancel = JSON.stringify({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 7 } });

  /** A POST /mcp written by hand, its Mcp-Session-Id header the bytes given. */
  const post = (session: Buffer, body: string) =>
    rawExchange(
      stack.apiUrl,
      Buffer.concat([
        Buffer.from(
          'POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n' +
            `authorization: Bearer ${DEMO.agent}\r\ncontent-type: application/json\r\n` +
            'accept: application/json, text/event-stream\r\nmcp-protocol-version: 2025-06-18\r\n' +
            `content-length: ${Buffer.byteLength(body)}\r\nmcp-session-id: `,
        ),
        session,
        Buffer.from(`\r\n\r\n${body}`),
      ]),
      // Not half-closed: a client that has gone is answered nothing (its connection closed before the answer).
      { halfClose: false },
    );

  const CASES: [string, Buffer][] = [
    ['256 characters (past any id given)', Buffer.from('s'.repeat(256))],
    ['10 kB', Buffer.from('s'.repeat(10_000))],
    ['a byte past ASCII (Latin-1 é)', Buffer.from([0x73, 0xe9, 0x73])],
    ['UTF-8 bytes of a non-ASCII name', Buffer.from('séssion-日本', 'utf8')],
    ['an inner space and a tab', Buffer.from('a b\tc')],
    ['only spaces', Buffer.from('   ')],
    ['empty', Buffer.from('')],
  ];

  it.each(CASES)('a session id of %s: a call is answered, a cancellation taken', async (_, session) => {
    const answered = await post(session, list);
    expect(answered.status).toBe(200);
    expect(answered.body).toContain('"tools"');
    const cancelled = await post(session, cancel);
    expect(cancelled.status).toBe(202);
  });

  it('a control character, a header past the size limit: a 4xx problem, never a 500', async () => {
    for (const control of ['\x01', '\x00', '\x7f', '\x1b']) {
      const refused = await post(Buffer.from(`s${control}s`, 'latin1'), list);
      expect(refused.status).toBe(400);
      expect(refused.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(JSON.parse(refused.body)).toMatchObject({ type: 'https://verity.dev/problems/bad-request', status: 400 });
    }
    const huge = await post(Buffer.from('s'.repeat(20_000)), list);
    expect(huge.status).toBe(431);
    expect(huge.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(JSON.parse(huge.body)).toMatchObject({ status: 431 });
  });

  it('a session id sent on initialize is not taken: the answer names a new one', async () => {
    const answered = await post(Buffer.from('chosen-by-the-client'), initialize);
    expect(answered.status).toBe(200);
    expect(answered.headers['mcp-session-id']).toMatch(/^[0-9a-f-]{36}$/);
    expect(answered.body).toContain('"protocolVersion"');
    const hostile = await post(Buffer.from('s'.repeat(10_000)), initialize);
    expect(hostile.status).toBe(200);
    expect(hostile.headers['mcp-session-id']).toMatch(/^[0-9a-f-]{36}$/);
  });
});
