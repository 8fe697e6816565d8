import { DEMO, Stack, freePort } from '../support/stack';
import { charge, continuedRequest, submission, unique } from '../support/http';

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
    api.child.kill('SIGTERM');
    // The API has begun to stop (it logs so first), and only then does the rest of the body come.
    await request.until('the API saying it stops', () => api.output.join('').includes('shutting down'));
    await new Promise((r) => setTimeout(r, 500));
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
