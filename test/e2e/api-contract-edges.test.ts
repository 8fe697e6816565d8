import { connect } from 'node:net';
import { DEMO, Stack } from '../support/stack';
import { charge, submission, unique } from '../support/http';

/**
 * Edges of the wire contract found from outside (red team, contract pass): every refusal is a 4xx
 * application/problem+json that names the field the caller actually sent (I10), including the requests Node would
 * answer itself, and nothing is written.
 */

describe('contract edges: problems name what the caller sent', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'apiedges', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  const count = async (table: string) =>
    ((await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM ${table}`)) as { n: number }[])[0].n;

  /** Raw bytes on a fresh connection, and everything the server answered until it closed. */
  function rawExchange(bytes: string): Promise<{ status: number; headers: Record<string, string>; body: string }> {
    const url = new URL(stack.apiUrl);
    return new Promise((resolve, reject) => {
      const socket = connect(Number(url.port), url.hostname);
      const chunks: Buffer[] = [];
      socket.on('data', (chunk: Buffer) => chunks.push(chunk));
      socket.on('error', reject);
      socket.on('close', () => {
        const text = Buffer.concat(chunks).toString('latin1');
        const [head, ...rest] = text.split('\r\n\r\n');
        const [statusLine, ...lines] = head.split('\r\n');
        const headers = Object.fromEntries(
          lines.map((line) => [
            line.slice(0, line.indexOf(':')).toLowerCase(),
            line.slice(line.indexOf(':') + 1).trim(),
          ]),
        );
        resolve({ status: Number(statusLine.split(' ')[1]), headers, body: rest.join('\r\n\r\n') });
      });
      // Written, not ended: the server answers and closes (a half-closed socket would be closed before the answer).
      socket.write(bytes);
    });
  }

  it('answers an HTTP/1.1 request without Host with a problem+json 400 (Node answered a bare 400), writing nothing', async () => {
    const before = await count('executions');
    const body = JSON.stringify(submission([charge(unique('nohost'))]));
    const answer = await rawExchange(
      'POST /v1/executions HTTP/1.1\r\n' +
        `authorization: Bearer ${DEMO.agent}\r\ncontent-type: application/json\r\n` +
        `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    expect(answer.status).toBe(400);
    expect(answer.headers['content-type']).toBe('application/problem+json; charset=utf-8');
    expect(answer.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    expect(JSON.parse(answer.body)).toMatchObject({
      status: 400,
      type: 'https://verity.dev/problems/bad-request',
      detail: expect.stringMatching(/Host/),
    });
    expect(await count('executions')).toBe(before);
    // HTTP/1.0 has no Host requirement: still served.
    const old = await rawExchange('GET /v1/status-model HTTP/1.0\r\n\r\n');
    expect(old.status).toBe(200);
  });
});
