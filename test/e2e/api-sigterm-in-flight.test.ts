import { connect } from 'node:net';
import { DEMO, Stack, freePort } from '../support/stack';
import { charge, continuedRequest, reach, submission, unique } from '../support/http';

/** A request on its way when the API is told to stop is answered, and answered by the API (not refused half-way). */
describe('API SIGTERM with a request in flight', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'apiterm', dispatchers: 0, reconcilers: 0 });
  }, 120_000);
  afterAll(async () => stack?.stop());

  it('a POST whose body is still arriving at SIGTERM is answered 201 and its execution is stored; exit 0', async () => {
    const port = await freePort();
    const api = await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1' });
    const body = JSON.stringify(submission([charge(unique('term-in-flight'))]));
    const request = await continuedRequest(
      api,
      port,
      `POST /v1/executions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${DEMO.agent}\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n`,
    );
    request.write(body.slice(0, 10));
    // A second connection whose request has begun (so it is not idle) at the signal. Answered once the API stops, it is
    // idle, and the API closes it on its next look for idle connections (every 100 ms while it stops).
    const other = connect(port, '127.0.0.1');
    let otherReceived = '';
    let otherClosed = false;
    other.on('data', (chunk: Buffer) => (otherReceived += chunk.toString()));
    other.once('close', () => (otherClosed = true));
    await new Promise<void>((resolve) => other.once('connect', () => resolve()));
    other.write('GET /health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n');
    api.child.kill('SIGTERM');
    // The API has begun to stop (it logs so first), has closed its listener (a new connection is refused), and has
    // since closed the connections gone idle, the other one among them: the request still arriving is on a connection
    // the stop has looked at and left open. Only then does the rest of its body come.
    await request.until('the API saying it stops', () => api.output.join('').includes('shutting down'));
    await request.until(
      'the API closing its listener',
      async () => (await reach('127.0.0.1', port)) === 'ECONNREFUSED',
    );
    other.write('\r\n');
    await request.until('the API closing the other connection once idle', () => otherClosed);
    expect(otherReceived).toMatch(/^HTTP\/1\.1 200 /);
    request.write(body.slice(10));
    await request.until('the answer', () => request.answer().includes('\r\n\r\n'));
    await request.end();
    const code = await api.exited;
    const answer = request.answer();
    expect(answer).toMatch(/^HTTP\/1\.1 201 /);
    const { id } = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as { id: string };
    const rows = (await stack.db.dataSource.query(
      `SELECT count(o.id)::int AS operations FROM executions e JOIN operations o ON o.execution_id = e.id WHERE e.id = $1`,
      [id],
    )) as { operations: number }[];
    expect(rows).toEqual([{ operations: 1 }]);
    expect(code).toBe(0);
  }, 60_000);
});
