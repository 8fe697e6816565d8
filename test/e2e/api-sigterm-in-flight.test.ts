import { connect } from 'node:net';
import { DEMO, Stack, freePort } from '../support/stack';
import { charge, submission, unique } from '../support/http';

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
    const socket = connect(port, '127.0.0.1');
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    let received = '';
    let socketClosed = false;
    socket.on('data', (chunk: Buffer) => (received += chunk.toString()));
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    void closed.then(() => (socketClosed = true));
    /** Waits for `what`; fails at once, saying so, if the API closed the connection or exited first. */
    const until = async (what: string, done: () => boolean): Promise<void> => {
      while (!done()) {
        if (socketClosed || api.child.exitCode !== null) {
          throw new Error(`${what}: the connection closed first; received ${JSON.stringify(received.slice(0, 400))}`);
        }
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    // `Expect: 100-continue`: the API answers "100 Continue" once it has read the headers, so the request is known to be
    // under way (not merely sent) before the API is told to stop.
    socket.write(
      `POST /v1/executions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${DEMO.agent}\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nExpect: 100-continue\r\n\r\n`,
    );
    await until('100 Continue', () => /^HTTP\/1\.1 100 [^\r]*\r\n\r\n/.test(received));
    const continued = received.length;
    socket.write(body.slice(0, 10));
    api.child.kill('SIGTERM');
    // The API has begun to stop (it logs so first), and only then does the rest of the body come.
    await until('the API saying it stops', () => api.output.join('').includes('shutting down'));
    await new Promise((r) => setTimeout(r, 500));
    socket.write(body.slice(10));
    await until('the answer', () => received.slice(continued).includes('\r\n\r\n'));
    socket.end();
    await closed;
    const code = await api.exited;
    const answer = received.slice(continued);
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
