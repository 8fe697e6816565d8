import { DEMO, Stack } from '../support/stack';
import { charge, http, rawExchange, submission, unique } from '../support/http';

/**
 * A stream whose request says `Connection: close`, or comes over HTTP/1.0, is closed once its `end` event is sent (RFC
 * 9112, section 9.6). The stream answered `Connection: keep-alive` whatever the request said, which overrode Node's
 * own choice: the connection stayed open after the answer — an HTTP/1.0 client, whose answer ends only when the
 * connection does, waited forever.
 */
describe('the event stream and a request that asks for the connection to close', () => {
  let stack: Stack;
  let executionId = '';

  beforeAll(async () => {
    // No workers: the cancelled execution's stream ends with its `end` event at once.
    stack = await Stack.start({ label: 'streamclose', dispatchers: 0, reconcilers: 0 });
    const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('close'))]),
    });
    expect(created.status).toBe(201);
    executionId = created.body.id;
    expect((await http(stack.apiUrl, 'POST', `/v1/executions/${executionId}/cancel`, { key: DEMO.agent })).status).toBe(
      200,
    );
  }, 60_000);
  afterAll(async () => stack?.stop());

  // rawExchange resolves when the server closes the connection: a connection left open fails the test by its timeout.
  it.each([
    ['HTTP/1.1 with Connection: close', 'HTTP/1.1', 'Connection: close\r\n'],
    ['HTTP/1.0', 'HTTP/1.0', ''],
  ])('%s: the whole stream, its end event, then the connection closes', async (_what, version, connection) => {
    const answer = await rawExchange(
      stack.apiUrl,
      `GET /v1/executions/${executionId}/stream ${version}\r\nHost: 127.0.0.1\r\n` +
        `Authorization: Bearer ${DEMO.agent}\r\n${connection}\r\n`,
      // Not half-closed: the stream takes a client that closed its side as gone, and answers nobody.
      { halfClose: false },
    );
    expect(answer.status).toBe(200);
    expect(answer.headers.connection).not.toBe('keep-alive');
    expect(answer.body).toMatch(/^event: end\ndata: \{"reason":"settled"\}$/m);
  });

  it('HTTP/1.1 without Connection: close keeps the connection for the next request', async () => {
    const answer = await rawExchange(
      stack.apiUrl,
      `GET /v1/executions/${executionId}/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${DEMO.agent}\r\n\r\n` +
        `GET /health/live HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`,
      { halfClose: false },
    );
    expect(answer.status).toBe(200);
    expect(answer.raw).toMatch(/event: end[\s\S]*HTTP\/1\.1 200 OK/);
  });
});
