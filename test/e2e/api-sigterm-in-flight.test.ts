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
    let answer = '';
    socket.on('data', (chunk: Buffer) => (answer += chunk.toString()));
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.write(
      `POST /v1/executions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${DEMO.agent}\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body.slice(0, 10)}`,
    );
    await new Promise((r) => setTimeout(r, 300));
    api.child.kill('SIGTERM');
    // The API has begun to stop (it logs so first), and only then does the rest of the body come.
    while (!api.output.join('').includes('shutting down')) await new Promise((r) => setTimeout(r, 20));
    await new Promise((r) => setTimeout(r, 500));
    socket.write(body.slice(10));
    while (!answer.includes('\r\n\r\n')) await new Promise((r) => setTimeout(r, 20));
    socket.end();
    await closed;
    const code = await api.exited;
    if (!answer.startsWith('HTTP/1.1 201 ')) console.log(answer.slice(0, 800), api.output.join('').slice(-3000));
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
