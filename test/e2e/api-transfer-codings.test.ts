import { DEMO, Stack } from '../support/stack';
import { charge, rawExchange, submission, unique } from '../support/http';

/**
 * A body sent with a transfer coding besides `chunked` (`Transfer-Encoding: gzip, chunked`): Node undoes the chunking
 * and hands on the bytes still in the codings it does not know, as if none were named. A body that said it was gzip
 * but was not was read as plain JSON and carried out (201), where the same body labelled `Content-Encoding: gzip` is
 * 400 `content_encoding`; and an intermediary that does undo the coding reads another body than the API did.
 */
describe('a transfer coding the API does not undo', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'api-transfer-codings', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  const count = async () =>
    ((await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM executions`)) as { n: number }[])[0].n;

  /** A chunked request of one chunk, with these headers. */
  function chunked(path: string, headers: Record<string, string>, body: string): Buffer {
    const bytes = Buffer.from(body);
    const head = Object.entries({ host: '127.0.0.1', connection: 'close', ...headers })
      .map(([name, value]) => `${name}: ${value}\r\n`)
      .join('');
    return Buffer.concat([
      Buffer.from(`POST ${path} HTTP/1.1\r\n${head}\r\n${bytes.length.toString(16)}\r\n`),
      bytes,
      Buffer.from('\r\n0\r\n\r\n'),
    ]);
  }
  const submit = (transferEncoding: string) =>
    rawExchange(
      stack.apiUrl,
      chunked(
        '/v1/executions',
        {
          authorization: `Bearer ${DEMO.agent}`,
          'content-type': 'application/json',
          'transfer-encoding': transferEncoding,
        },
        JSON.stringify(submission([charge(unique('coding'))])),
      ),
      { halfClose: false },
    );

  it.each(['gzip, chunked', 'deflate,chunked', 'x-custom, chunked', 'identity, chunked'])(
    'POST /v1/executions with Transfer-Encoding: %s is 400 bad-request naming the header, and nothing is written',
    async (transferEncoding) => {
      const before = await count();
      const answer = await submit(transferEncoding);
      expect(answer.status).toBe(400);
      expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/);
      const problem = JSON.parse(answer.body) as { type: string; detail: string };
      expect(problem.type).toBe('https://verity.dev/problems/bad-request');
      expect(problem.detail).toMatch(/transfer-encoding/i);
      expect(await count()).toBe(before);
    },
  );

  it('POST /mcp with Transfer-Encoding: gzip, chunked is a JSON-RPC error, and the submission is not made', async () => {
    const before = await count();
    const call = {
      jsonrpc: '2.0',
      id: 7,
      method: 'tools/call',
      params: { name: 'submit_execution', arguments: submission([charge(unique('coding-mcp'))]) },
    };
    const answer = await rawExchange(
      stack.apiUrl,
      chunked(
        '/mcp',
        {
          authorization: `Bearer ${DEMO.agent}`,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'transfer-encoding': 'gzip, chunked',
        },
        JSON.stringify(call),
      ),
      { halfClose: false },
    );
    expect(answer.status).toBe(400);
    const body = JSON.parse(answer.body) as { jsonrpc: string; error?: { code: number; message: string } };
    expect(body.jsonrpc).toBe('2.0');
    expect(body.error?.message).toMatch(/transfer-encoding/i);
    expect(await count()).toBe(before);
  });

  it.each(['chunked', 'Chunked'])(
    'still takes a body sent with Transfer-Encoding: %s alone',
    async (transferEncoding) => {
      const before = await count();
      const answer = await submit(transferEncoding);
      expect(answer.status).toBe(201);
      expect(await count()).toBe(before + 1);
    },
  );
});
