import { createServer, IncomingMessage, ServerResponse } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { Verity } from './client';
import { VerityError, VerityMissingETagError, VerityNetworkError } from './errors';
import { createVerityMcpServer } from './mcp/server';
import { closedAfterEachTest, listenLocally } from '../../../test/support/local-server';
import { UNIT_SUBMISSION } from '../../../test/support/http';

const closeAfterTest = closedAfterEachTest();

interface Seen {
  method: string;
  url: string;
}

async function listen(handler: (req: IncomingMessage, res: ServerResponse, n: number) => void) {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      seen.push({ method: req.method!, url: req.url! });
      handler(req, res, seen.length);
    });
  });
  return { ...closeAfterTest(await listenLocally(server)), seen };
}

describe('SDK: a POST answered with a redirect', () => {
  it.each([301, 302, 303])(
    'a create answered %i is never turned into a GET and reported as accepted',
    async (status) => {
      const api = await listen((req, res) => {
        if (req.method === 'POST') {
          res.writeHead(status, { location: '/v1/executions' });
          res.end();
          return;
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ data: [], next_cursor: null }));
      });
      const dx = new Verity({ baseUrl: api.url, apiKey: 'sk-unit', backoffMs: 1 });
      const outcome = await dx.executions.createWithMeta(UNIT_SUBMISSION).then(
        (created) => ({ created }),
        (error: unknown) => ({ error }),
      );
      // Only the POST was sent: the SDK did not follow the redirect with a GET of the list.
      expect(api.seen.map((s) => s.method)).toEqual(['POST']);
      expect(outcome).toHaveProperty('error');
      expect((outcome as { error: unknown }).error).toBeInstanceOf(VerityError);
      expect((outcome as { error: VerityError }).error.status).toBe(status);
    },
  );

  it('an approval answered 307 is not sent a second time to the Location', async () => {
    const api = await listen((req, res, n) => {
      if (n === 1) {
        res.writeHead(307, { location: '/elsewhere/approval' });
        res.end();
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: 'op_1' }));
    });
    const dx = new Verity({ baseUrl: api.url, apiKey: 'sk-unit' });
    await dx.operations.approve('op_1').catch(() => undefined);
    expect(api.seen).toEqual([{ method: 'POST', url: '/v1/operations/op_1/approval' }]);
  });
});

describe('SDK: the HTTP status, not the body, decides whether a create may have been carried out', () => {
  it('a 502 whose JSON body names another status is still inconclusive: retried with the same key', async () => {
    const api = await listen((req, res, n) => {
      if (n === 1) {
        res.writeHead(502, { 'content-type': 'application/json' });
        // A gateway's JSON with a status member of its own.
        res.end(JSON.stringify({ status: 400, title: 'upstream error' }));
        return;
      }
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: 'exe_1', operations: [] }));
    });
    const dx = new Verity({ baseUrl: api.url, apiKey: 'sk-unit', backoffMs: 1 });
    const created = await dx.executions.createWithMeta(UNIT_SUBMISSION).catch((error: unknown) => error);
    expect(api.seen).toHaveLength(2);
    expect(created).toMatchObject({ attempts: 2 });
  });

  it('a 503 on a cancel whose JSON body says 400 is outcomeUnknown, never a plain refusal', async () => {
    const api = await listen((req, res) => {
      res.writeHead(503, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ status: 400, title: 'upstream error' }));
    });
    const dx = new Verity({ baseUrl: api.url, apiKey: 'sk-unit' });
    const error = (await dx.executions.cancel('exe_1').catch((e: unknown) => e)) as VerityError;
    expect(error).toBeInstanceOf(VerityError);
    expect(error.outcomeUnknown).toBe(true);
  });
});

describe('SDK: a create the caller aborts', () => {
  it('after the request reached the server: outcome unknown, with the generated key, and repeating it with that key finds the one execution', async () => {
    const controller = new AbortController();
    const keys: string[] = [];
    const api = await listen((req, res) => {
      keys.push(String(req.headers['idempotency-key']));
      if (keys.length === 1) {
        // The server has the request (as if it committed the execution); the caller gives up before the answer.
        controller.abort(new Error('caller gave up'));
        return;
      }
      res.writeHead(201, { 'content-type': 'application/json', 'idempotent-replayed': 'true' });
      res.end(JSON.stringify({ id: 'exe_1', status: 'pending' }));
    });
    const dx = new Verity({ baseUrl: api.url, apiKey: 'sk-unit', backoffMs: 1 });
    const error = await dx.executions.create(UNIT_SUBMISSION, { signal: controller.signal }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(VerityNetworkError);
    expect(error).toMatchObject({ outcomeUnknown: true, idempotencyKey: keys[0], attempts: 1 });
    expect((error as Error).cause).toEqual(new Error('caller gave up'));
    expect((error as Error).message).toContain('repeat it with the same Idempotency-Key');
    const again = await dx.executions.createWithMeta(UNIT_SUBMISSION, {
      idempotencyKey: (error as VerityNetworkError).idempotencyKey,
    });
    expect(again.replayed).toBe(true);
    expect(keys).toEqual([keys[0], keys[0]]);
  });

  it('during the backoff after an inconclusive answer: outcome unknown with the key, not a bare abort', async () => {
    const controller = new AbortController();
    const api = await listen((_req, res) => {
      res.writeHead(503, { 'content-type': 'application/problem+json' });
      res.end(JSON.stringify({ type: 'about:blank', title: 'busy', status: 503 }));
      setImmediate(() => controller.abort(new Error('caller gave up')));
    });
    const dx = new Verity({ baseUrl: api.url, apiKey: 'sk-unit', backoffMs: 60_000 });
    const error = await dx.executions
      .create(UNIT_SUBMISSION, { signal: controller.signal, idempotencyKey: 'k-backoff' })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(VerityNetworkError);
    expect(error).toMatchObject({ outcomeUnknown: true, idempotencyKey: 'k-backoff' });
    expect(api.seen).toHaveLength(1);
  });

  it('before anything was sent: the abort itself, nothing unknown', async () => {
    const api = await listen((_req, res) => res.end());
    const dx = new Verity({ baseUrl: api.url, apiKey: 'sk-unit' });
    const reason = new Error('never mind');
    const error = await dx.executions
      .create(UNIT_SUBMISSION, { signal: AbortSignal.abort(reason) })
      .catch((e: unknown) => e);
    expect(error).toBe(reason);
    expect(api.seen).toHaveLength(0);
  });

  it('a GET aborted in flight throws the abort reason: a read has no outcome to learn', async () => {
    const controller = new AbortController();
    const api = await listen(() => controller.abort(new Error('enough')));
    const dx = new Verity({ baseUrl: api.url, apiKey: 'sk-unit' });
    const error = await dx.get('exe_1', { signal: controller.signal }).catch((e: unknown) => e);
    expect(error).toEqual(new Error('enough'));
  });
});

describe('ExecutionStream: frames whose data names no id', () => {
  it('resumes after the SSE id of the last frame, not from the start: no duplicate', async () => {
    const lastEventIds: (string | undefined)[] = [];
    const server = createServer((req, res) => {
      const header = req.headers['last-event-id'] as string | undefined;
      lastEventIds.push(header);
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const after = header ? Number(header) : 0;
      // CRLF line endings; the data carries a seq and a type, the id travels in the frame's `id:` only.
      const frame = (seq: number) => `id: ${seq}\r\nevent: x\r\ndata: {"seq":${seq},"type":"x","note":"é"}\r\n\r\n`;
      if (after === 0) {
        const bytes = Buffer.from(frame(1) + frame(2));
        // Split inside the two-byte é of the second frame, then tear the connection.
        const cut = bytes.indexOf(Buffer.from('é', 'utf8'), bytes.indexOf('"seq":2')) + 1;
        res.write(bytes.subarray(0, cut), () => res.write(bytes.subarray(cut), () => req.socket.destroy()));
        return;
      }
      for (let seq = after + 1; seq <= 4; seq += 1) res.write(frame(seq));
      res.end('event: end\r\ndata: {"reason":"settled"}\r\n\r\n');
    });
    const { url } = closeAfterTest(await listenLocally(server));
    const dx = new Verity({ baseUrl: url, apiKey: 'sk-unit' });
    const events = await dx.stream('exe_1', { reconnectDelayMs: 1 }).toArray();
    expect(events.map((e) => e.seq)).toEqual([1, 2, 3, 4]);
    expect(events[1]).toMatchObject({ note: 'é' });
    expect(lastEventIds).toEqual([undefined, '2']);
  });
});

describe('MCP: wait_for_execution answers within its bound', () => {
  // After a wait that ran out, the state was read under the read bound of its own, so the answer could come
  // timeout_seconds + readTimeoutMs after the call (50 s + 50 s by default, past the 60 s an MCP client waits). The
  // read after the wait has a bound of its own now (waitReadTimeoutMs, 8 s by default), here 200 ms.
  it('with the API hanging, the answer comes within timeout_seconds plus a small margin, not timeout + read bound', async () => {
    const api = await listen(() => {
      // Never answers: a database stall.
    });
    const readTimeoutMs = 2_000;
    const mcp = createVerityMcpServer({
      client: new Verity({ baseUrl: api.url, apiKey: 'sk-unit', backoffMs: 5 }),
      readTimeoutMs,
      waitReadTimeoutMs: 200,
    });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await mcp.server.connect(serverSide);
    const client = new Client({ name: 'unit', version: '0' });
    await client.connect(clientSide);
    try {
      const result = (await client.callTool({
        name: 'wait_for_execution',
        arguments: { execution_id: 'exe_1', timeout_seconds: 1 },
      })) as CallToolResult;
      expect(result.isError).toBe(true);
      // The tool promises an answer after timeout_seconds; a second full read bound (here 2 s, by default 50 s
      // on top of a 50 s wait: past every MCP client's 60 s timeout) must not be added to it. The bound that fired,
      // named in the answer, is the read's after the wait (0.2 s), not the read bound (2 s).
      expect((result.content as { text: string }[])[0].text).toContain('(no answer within 0.2 s)');
    } finally {
      mcp.close();
      await client.close();
      await mcp.server.close();
    }
  });
});

/**
 * An API answering every request with operation op_1, under `etag` where given, and the SDK client of it; `headers`
 * gets each request's If-Match (undefined where none was sent).
 */
async function operationApi(etag?: string) {
  const headers: (string | undefined)[] = [];
  const api = await listen((req, res) => {
    headers.push(req.headers['if-match']);
    res.writeHead(200, { 'content-type': 'application/json', ...(etag === undefined ? {} : { etag }) });
    res.end(JSON.stringify({ id: 'op_1' }));
  });
  return { api, headers, dx: new Verity({ baseUrl: api.url, apiKey: 'sk-unit' }) };
}

describe('SDK: deciding on the operation as it was read (ETag, If-Match)', () => {
  it('getWithETag gives the ETag; ifMatch is sent as If-Match with each decision, and nothing without it', async () => {
    const { dx, headers } = await operationApi('"v2"');
    expect(await dx.operations.getWithETag('op_1')).toEqual({ operation: { id: 'op_1' }, etag: '"v2"' });
    await dx.operations.approve('op_1', { ifMatch: '"v1"' });
    await dx.operations.deny('op_1', { reason: 'no', ifMatch: '"v1"' });
    await dx.operations.resolve('op_1', { status: 'FAILED', evidence: 'none' }, { ifMatch: '"v1"' });
    await dx.operations.recheck('op_1', { ifMatch: '"v1"' });
    await dx.operations.resolve('op_1', { status: 'FAILED', evidence: 'none' });
    expect(headers).toEqual([undefined, '"v1"', '"v1"', '"v1"', '"v1"', undefined]);
  });

  it('getWithETag of an ETag a proxy weakened (W/) gives the opaque tag, and the decision names it as the API sent it', async () => {
    // The ETag weakened, as nginx does to a strong one when it compresses the answer.
    const { dx, headers } = await operationApi('W/"v2"');
    const { etag } = await dx.operations.getWithETag('op_1');
    expect(etag).toBe('"v2"');
    await dx.operations.approve('op_1', { ifMatch: etag });
    expect(headers).toEqual([undefined, '"v2"']);
  });
});

describe('SDK: no decision without a version by accident', () => {
  it('getWithETag of an answer whose ETag was stripped throws VerityMissingETagError (with what was read), never an empty ETag', async () => {
    // Through a proxy that drops the ETag header.
    const { dx } = await operationApi();
    const error = await dx.operations.getWithETag('op_1').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(VerityMissingETagError);
    expect(error).toMatchObject({ method: 'GET', path: '/v1/operations/op_1', operation: { id: 'op_1' } });
    expect((error as Error).message).toContain('without an ETag');
    // The plain read needs no version: it still answers.
    expect(await dx.operations.get('op_1')).toEqual({ id: 'op_1' });
  });

  it.each(['', ' ', '"v1"\n', ' "v1"'])(
    'ifMatch %j is refused with a TypeError before anything is sent, for every decision',
    async (ifMatch) => {
      const { api, dx } = await operationApi();
      const outcomes = await Promise.all(
        [
          () => dx.operations.approve('op_1', { ifMatch }),
          () => dx.operations.deny('op_1', { reason: 'no', ifMatch }),
          () => dx.operations.resolve('op_1', { status: 'FAILED', evidence: 'none' }, { ifMatch }),
          () => dx.operations.recheck('op_1', { ifMatch }),
        ].map((call) => call().catch((e: unknown) => e)),
      );
      for (const outcome of outcomes) {
        expect(outcome).toBeInstanceOf(TypeError);
        expect((outcome as Error).message).toContain('ifMatch');
      }
      expect(api.seen).toEqual([]);
    },
  );
});
