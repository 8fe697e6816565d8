import { createServer, IncomingMessage, ServerResponse } from 'node:http';
import { Verity } from './client';
import { VerityNetworkError, VerityNotFoundError, VerityRateLimitError, VerityServerError } from './errors';
import { MAX_STREAM_FRAME_BYTES, MalformedFrame, OversizedFrame } from './stream';
import type { ExecutionEvent } from './types';
import { closedAfterEachTest, listenLocally } from '../../../test/support/local-server';

const KEY = 'sk-test-secret-key-789';
const TOTAL = 8;

function event(seq: number): ExecutionEvent {
  return {
    id: `evt_${seq}`,
    execution_id: 'exe_1',
    operation_id: null,
    seq,
    type: 'execution.status_changed',
    from_status: null,
    to_status: null,
    data: { n: seq },
    created_at: new Date(0).toISOString(),
  } as ExecutionEvent;
}

function frame(seq: number): string {
  const view = event(seq);
  return `id: ${view.id}\nevent: ${view.type}\ndata: ${JSON.stringify(view)}\n\n`;
}

const closeAfterTest = closedAfterEachTest();

interface Connection {
  lastEventId: string | undefined;
  auth: string | undefined;
  url: string;
}

/**
 * An SSE server shaped like the API's: `retry:` first, heartbeat comments, frames resumed after Last-Event-ID, and
 * `event: end` at the end. `cut(n)` says how many frames connection n delivers before the socket is destroyed in
 * the middle of the next frame (undefined: deliver everything and end). It is closed after the test.
 */
async function sseServer(
  cut: (connection: number) => number | undefined,
  endData = '{"reason":"settled"}',
  retryMs = 10,
) {
  const connections: Connection[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const lastEventId = req.headers['last-event-id'] as string | undefined;
    connections.push({ lastEventId, auth: req.headers.authorization, url: req.url! });
    if (!req.url!.startsWith('/v1/executions/exe_1/stream')) {
      res.writeHead(404, { 'content-type': 'application/problem+json' });
      res.end(
        JSON.stringify({ type: 'https://verity.dev/problems/not-found', title: 'Execution not found', status: 404 }),
      );
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
    res.write(`retry: ${retryMs}\n\n`);
    const after = lastEventId ? Number(lastEventId.replace('evt_', '')) : 0;
    const limit = cut(connections.length);
    let sent = 0;
    for (let seq = after + 1; seq <= TOTAL; seq += 1) {
      if (limit !== undefined && sent === limit) {
        const partial = frame(seq);
        res.write(partial.slice(0, Math.floor(partial.length / 2)), () => req.socket.destroy());
        return;
      }
      res.write(frame(seq));
      if (seq % 3 === 0) res.write(': heartbeat\n\n');
      sent += 1;
    }
    res.end(`event: end\ndata: ${endData}\n\n`);
  });
  return closeAfterTest({ ...(await listenLocally(server)), connections });
}

describe('ExecutionStream over a real SSE server', () => {
  it('resumes with Last-Event-ID after torn connections: no gap, no duplicate, ends on settle', async () => {
    const server = await sseServer((n) => (n === 1 ? 3 : n === 2 ? 2 : undefined));
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY });
    const stream = dx.stream('exe_1');
    const seqs: number[] = [];
    for await (const e of stream) seqs.push(e.seq);
    expect(seqs).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(stream.endReason).toBe('settled');
    expect(stream.connections).toBe(3);
    expect(stream.lastEventId).toBe('evt_8');
    expect(server.connections.map((c) => c.lastEventId)).toEqual([undefined, 'evt_3', 'evt_5']);
    for (const c of server.connections) {
      expect(c.auth).toBe(`Bearer ${KEY}`);
      expect(c.url).not.toContain(KEY);
    }
  });

  it.each([
    ['{"reason":"deadline"}', 'deadline'],
    ['{"reason":"key_revoked"}', 'key_revoked'],
    ['{"reason":"settled"}', 'settled'],
    ['{}', 'settled'],
  ])('exposes the end reason of %s as %s, after every event', async (data, reason) => {
    const server = await sseServer(() => undefined, data);
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY });
    const stream = dx.stream('exe_1');
    expect((await stream.toArray()).map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(stream.endReason).toBe(reason);
    expect(server.connections).toHaveLength(1);
  });

  it('starts after a given lastEventId', async () => {
    const server = await sseServer(() => undefined);
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY });
    const events = await dx.stream('exe_1', { lastEventId: 'evt_5' }).toArray();
    expect(events.map((e) => e.seq)).toEqual([6, 7, 8]);
    expect(server.connections[0].lastEventId).toBe('evt_5');
  });

  it('refuses a lastEventId no header can carry before connecting, instead of reconnecting for minutes', async () => {
    const server = await sseServer(() => undefined);
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY });
    for (const lastEventId of ['evt_5€', 'evt_5\u200b', 'evt_5\n', 'evt 5', 'evt_\u00005']) {
      const error = await dx
        .stream('exe_1', { lastEventId, maxReconnects: 1, reconnectDelayMs: 5 })
        .toArray()
        .catch((e: unknown) => e);
      expect([lastEventId, error]).toEqual([lastEventId, expect.any(RangeError)]);
      expect((error as Error).message).toContain('lastEventId');
    }
    expect(server.connections).toHaveLength(0);
  });

  it.each([
    ['an id: line above U+00FF', 'id: evt_2\u2603\n', { ...event(2), id: undefined }],
    ['an id in the data with a CR and LF', '', { ...event(2), id: 'evt_2\r\nx-injected: 1' }],
    ['an id: line with a space', 'id: evt 2\n', { ...event(2), id: undefined }],
  ])(
    'fails with MalformedFrame on an event id no Last-Event-ID can carry (%s), instead of reconnecting for minutes',
    async (_case, idLine, data) => {
      let connections = 0;
      const server = createServer((req, res) => {
        connections += 1;
        res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
        res.write(`retry: 10\n\n${frame(1)}${idLine}data: ${JSON.stringify(data)}\n\n`, () => req.socket.destroy());
      });
      const { url } = closeAfterTest(await listenLocally(server));
      const stream = new Verity({ baseUrl: url, apiKey: KEY }).stream('exe_1', { reconnectDelayMs: 5 });
      const seen: number[] = [];
      const error = await (async () => {
        for await (const e of stream) seen.push(e.seq);
      })().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(MalformedFrame);
      expect((error as Error).message).toContain('Last-Event-ID');
      expect(seen).toEqual([1]);
      // Where a new stream may resume: the last id that can be sent.
      expect(stream.lastEventId).toBe('evt_1');
      expect(connections).toBe(1);
    },
  );

  it('closes the connection when the consumer stops early', async () => {
    const server = await sseServer(() => undefined);
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY });
    const stream = dx.stream('exe_1');
    for await (const e of stream) if (e.seq === 2) break;
    expect(stream.lastEventId).toBe('evt_2');
    expect(stream.endReason).toBeUndefined();
  });

  it('throws the API error for a stream it may not open', async () => {
    const server = await sseServer(() => undefined);
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY });
    await expect(dx.stream('exe_missing').toArray()).rejects.toBeInstanceOf(VerityNotFoundError);
    expect(server.connections).toHaveLength(1);
  });

  it('gives up with a network error when no connection can be made', async () => {
    const server = await sseServer(() => undefined);
    const url = server.url;
    await server.close();
    const dx = new Verity({ baseUrl: url, apiKey: KEY });
    const error = await dx
      .stream('exe_1', { maxReconnects: 2, reconnectDelayMs: 5 })
      .toArray()
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(VerityNetworkError);
    expect(error).toMatchObject({ attempts: 3, outcomeUnknown: false });
  });

  it('gives up with the last answer when every reconnection was answered (a 503 with its problem), never "no response"', async () => {
    let requests = 0;
    const server = createServer((_req, res) => {
      requests += 1;
      res.writeHead(503, { 'content-type': 'application/problem+json', 'retry-after': '0' });
      res.end(
        JSON.stringify({
          type: 'https://verity.dev/problems/secrets-unreadable',
          title: 'Secrets unreadable',
          status: 503,
          detail: `answer ${requests}: the tenant's secrets do not open with this process' key`,
        }),
      );
    });
    const { url } = closeAfterTest(await listenLocally(server));
    const error = await new Verity({ baseUrl: url, apiKey: KEY })
      .stream('exe_1', { maxReconnects: 2, reconnectDelayMs: 5 })
      .toArray()
      .catch((e: unknown) => e);
    expect(requests).toBe(3);
    expect(error).toBeInstanceOf(VerityServerError);
    expect(error).toMatchObject({
      status: 503,
      code: 'secrets-unreadable',
      detail: "answer 3: the tenant's secrets do not open with this process' key",
    });
    expect((error as Error).message).not.toContain('no response');
  });

  it('hands a Retry-After longer than 10 s to the caller instead of reconnecting at once', async () => {
    const requests: string[] = [];
    const server = createServer((req, res) => {
      requests.push(req.url!);
      // 3,000 years: past what a Node timer can hold, which would fire at once.
      res.writeHead(429, { 'content-type': 'application/problem+json', 'retry-after': '99999999999' });
      res.end(JSON.stringify({ type: 'https://verity.dev/problems/too-many-streams', title: 'x', status: 429 }));
    });
    const { url } = await closeAfterTest(await listenLocally(server));
    const dx = new Verity({ baseUrl: url, apiKey: KEY });
    const error = await dx
      .stream('exe_1')
      .toArray()
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(VerityRateLimitError);
    expect(requests).toHaveLength(1);
  });

  it("takes at most 10 s of the server's retry hint, so an absurd one is no reconnect storm", async () => {
    const server = await sseServer((n) => (n === 1 ? 1 : undefined), undefined, 99_999_999_999);
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY });
    const controller = new AbortController();
    const overflows: string[] = [];
    const onWarning = (warning: Error) => overflows.push(warning.name);
    process.on('warning', onWarning);
    try {
      const run = (async () => {
        for await (const e of dx.stream('exe_1', { signal: controller.signal })) {
          // The connection is torn after this frame; the stream is then waiting to reconnect.
          if (e.seq === 1) setTimeout(() => controller.abort(new Error('enough')), 200);
        }
      })();
      await expect(run).rejects.toThrow('enough');
    } finally {
      process.off('warning', onWarning);
    }
    expect(server.connections).toHaveLength(1);
    expect(overflows).not.toContain('TimeoutOverflowWarning');
  });

  it("takes at least 100 ms of the server's retry hint: retry: 0 and an at once closed stream is no reconnect loop", async () => {
    const at: number[] = [];
    const server = createServer((_req, res) => {
      at.push(performance.now());
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
      // Accepted (so the failure count resets), then closed without an event: a broken proxy, or a hostile server.
      res.end('retry: 0\n\n');
    });
    const { url } = closeAfterTest(await listenLocally(server));
    const controller = new AbortController();
    const run = (async () => {
      for await (const _ of new Verity({ baseUrl: url, apiKey: KEY }).stream('exe_1', { signal: controller.signal })) {
        // No event comes.
      }
    })();
    const result = run.then(
      () => 'ended',
      (error: Error) => error.message,
    );
    while (at.length < 4) await new Promise((resolve) => setImmediate(resolve));
    controller.abort(new Error('enough'));
    expect(await result).toBe('enough');
    const gaps = at.slice(1).map((t, i) => t - at[i]);
    // A timer may fire a fraction of a millisecond early; before, the gaps were a millisecond or two.
    expect(gaps.every((gap) => gap >= 95)).toBe(true);
  });

  it('stops with the caller signal', async () => {
    const server = await sseServer((n) => (n === 1 ? 2 : undefined));
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY });
    const controller = new AbortController();
    const seen: number[] = [];
    const run = (async () => {
      for await (const e of dx.stream('exe_1', { signal: controller.signal, reconnectDelayMs: 10_000 })) {
        seen.push(e.seq);
        if (e.seq === 2) setTimeout(() => controller.abort(new Error('enough')), 20);
      }
    })();
    await expect(run).rejects.toThrow('enough');
    expect(seen).toEqual([1, 2]);
  });

  /**
   * A server that starts a frame with `opening` and then sends `filler` until it has sent `totalBytes` (backpressure
   * respected) or the client hangs up, then closes without ending the frame. How much it sent is `sent`.
   */
  async function unendingFrameServer(opening: string, filler: string, totalBytes: number) {
    const state = { sent: 0, connections: 0 };
    const server = createServer((req, res) => {
      state.connections += 1;
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
      res.write(`retry: 10\n\n: heartbeat\n\n${opening}`);
      const chunk = filler.repeat(Math.ceil((64 * 1024) / filler.length));
      const pump = () => {
        while (state.sent < totalBytes && !res.destroyed) {
          state.sent += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        res.destroy();
      };
      pump();
    });
    return { ...closeAfterTest(await listenLocally(server)), state };
  }

  it.each([
    ['one endless line', 'data: ', 'x'],
    ['data lines with no blank line to end the event', '', 'data: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n'],
    // A comment or a retry hint between the data lines of one event ends no frame: the event's data is still held.
    ['data lines of one event with comments between them', '', `data: ${'x'.repeat(1000)}\n: still here\n`],
    ['data lines of one event with retry hints between them', '', `data: ${'x'.repeat(1000)}\nretry: 1000\n`],
    // The same with the other line endings: a bare CR, or a CRLF, ends a data line and no frame.
    ['data lines ended by a bare CR with no blank line', '', `data: ${'x'.repeat(1000)}\r`],
    ['data lines ended by CRLF with no blank line', '', `data: ${'x'.repeat(1000)}\r\n`],
    [
      'data lines ended by CR and LF alternately (no blank line among them)',
      '',
      `data: ${'x'.repeat(1000)}\rdata: y\n`,
    ],
  ])(
    'fails with OversizedFrame on %s, instead of holding it all, and does not reconnect',
    async (_case, opening, filler) => {
      const server = await unendingFrameServer(opening, filler, 16 * MAX_STREAM_FRAME_BYTES);
      const error = await new Verity({ baseUrl: server.url, apiKey: KEY })
        .stream('exe_1', { maxReconnects: 0 })
        .toArray()
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OversizedFrame);
      expect(error).toMatchObject({ name: 'OversizedFrame', limitBytes: MAX_STREAM_FRAME_BYTES });
      expect(server.state.connections).toBe(1);
      // The client hung up once past the bound, long before the server's 16 MiB were sent.
      expect(server.state.sent).toBeLessThan(8 * MAX_STREAM_FRAME_BYTES);
    },
  );

  it('reads on past more than the bound of frames that carry no data, each ended by its blank line', async () => {
    const server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
      // Frames the parser dispatches nothing for (no data line), 2 MiB of them: each ends, none is held.
      const dataless = 'event: ping\n\nid: 7\n\n\n'.repeat(1024);
      for (let sent = 0; sent <= 2 * MAX_STREAM_FRAME_BYTES; sent += dataless.length) res.write(dataless);
      res.end(`id: evt_1\ndata: ${JSON.stringify(event(1))}\n\nevent: end\ndata: {"reason":"settled"}\n\n`);
    });
    const { url } = closeAfterTest(await listenLocally(server));
    const events = await new Verity({ baseUrl: url, apiKey: KEY }).stream('exe_1', { maxReconnects: 0 }).toArray();
    expect(events.map((e) => e.seq)).toEqual([1]);
  });

  it.each([
    ['LF', '\n'],
    ['CRLF', '\r\n'],
    ['a bare CR', '\r'],
  ])(
    'still reads an event just under the bound, after heartbeats that each end a frame (lines ended by %s)',
    async (_eol, eol) => {
      const big = { ...event(1), data: { blob: 'y'.repeat(MAX_STREAM_FRAME_BYTES - 4096) } } as ExecutionEvent;
      const server = createServer((_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
        for (let i = 0; i < 64; i += 1) res.write(`: ${'h'.repeat(32 * 1024)}${eol}${eol}`);
        res.end(
          `id: evt_1${eol}data: ${JSON.stringify(big)}${eol}${eol}event: end${eol}data: {"reason":"settled"}${eol}${eol}`,
        );
      });
      const { url } = closeAfterTest(await listenLocally(server));
      const events = await new Verity({ baseUrl: url, apiKey: KEY }).stream('exe_1', { maxReconnects: 0 }).toArray();
      expect(events.map((e) => e.seq)).toEqual([1]);
      expect((events[0].data as { blob: string }).blob).toHaveLength(MAX_STREAM_FRAME_BYTES - 4096);
    },
  );
});

describe('ExecutionStream: every SSE line ending (CRLF, LF, bare CR), wherever the chunks are cut', () => {
  function sseFrame(seq: number, eol: string): string {
    return `id: evt_${seq}${eol}event: x${eol}data: ${JSON.stringify(event(seq))}${eol}${eol}`;
  }
  const endFrame = (eol: string) => `event: end${eol}data: {"reason":"settled"}${eol}${eol}`;

  /** A fetch that hands the SDK the real server's body, telling `onChunk` the text of each chunk the SDK reads. */
  function watchingChunks(onChunk: (text: string) => void): typeof fetch {
    return async (input, init) => {
      const response = await fetch(input, init);
      const decoder = new TextDecoder();
      const body = response.body!.pipeThrough(
        new TransformStream<Uint8Array, Uint8Array>({
          transform(chunk, controller) {
            controller.enqueue(chunk);
            onChunk(decoder.decode(chunk, { stream: true }));
          },
        }),
      );
      return new Response(body, { status: response.status, headers: response.headers });
    };
  }

  it.each([
    ['bare CR', '\r'],
    ['LF', '\n'],
    ['CRLF', '\r\n'],
  ])(
    'yields a frame whose lines end with %s as soon as its blank line arrives, and ends on the end frame',
    async (_name, eol) => {
      let gotFirst!: () => void;
      const firstYielded = new Promise<void>((resolve) => (gotFirst = resolve));
      const server = createServer((_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
        // Nothing more comes until the consumer has the first event: a reader that waits for the byte after a CR to
        // end the line would wait for ever here (and be dropped as idle).
        res.write(`retry: 10${eol}${eol}${sseFrame(1, eol)}`);
        void firstYielded.then(() => res.end(sseFrame(2, eol) + sseFrame(3, eol) + endFrame(eol)));
      });
      const { url } = closeAfterTest(await listenLocally(server));
      const stream = new Verity({ baseUrl: url, apiKey: KEY }).stream('exe_1', {
        maxReconnects: 0,
        idleTimeoutMs: 10_000,
      });
      const seqs: number[] = [];
      for await (const e of stream) {
        seqs.push(e.seq);
        if (e.seq === 1) gotFirst();
      }
      expect(seqs).toEqual([1, 2, 3]);
      expect(stream.endReason).toBe('settled');
      expect(stream.connections).toBe(1);
    },
  );

  it('a CRLF cut between two chunks (one ends with CR, the next starts with LF) is one line end, not a blank line', async () => {
    // The data of one event over two lines: `{` then the rest. A reader taking the LF for a blank line would end the
    // event after `{` (not JSON: MalformedFrame).
    const json = JSON.stringify(event(1));
    const head = `retry: 10\r\n\r\nid: evt_1\r\ndata: {\r`;
    const tail = `\ndata: ${json.slice(1)}\r\n\r\n${endFrame('\r\n')}`;
    let sawCut!: () => void;
    const cutSeen = new Promise<void>((resolve) => (sawCut = resolve));
    const chunks: string[] = [];
    const server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
      res.write(head);
      // The tail only once the SDK has read a chunk ending with the CR: the cut falls exactly there.
      void cutSeen.then(() => res.end(tail));
    });
    const { url } = closeAfterTest(await listenLocally(server));
    const dx = new Verity({
      baseUrl: url,
      apiKey: KEY,
      fetch: watchingChunks((text) => {
        chunks.push(text);
        if (text.endsWith('\r')) sawCut();
      }),
    });
    const events = await dx.stream('exe_1', { maxReconnects: 0 }).toArray();
    expect(chunks[0]).toBe(head);
    expect(chunks[1].startsWith('\n')).toBe(true);
    expect(events).toEqual([event(1)]);
  });

  it('a frame whose blank line is a lone CR in a chunk of its own is yielded at once, not when more bytes come', async () => {
    const json = JSON.stringify(event(1));
    let sawCut!: () => void;
    const cutSeen = new Promise<void>((resolve) => (sawCut = resolve));
    let gotEvent!: () => void;
    const eventYielded = new Promise<void>((resolve) => (gotEvent = resolve));
    const server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
      res.write(`retry: 10\r\rid: evt_1\rdata: ${json}\r`);
      // The CR that ends the frame alone, once the data line's CR was read; the end frame only after the event came.
      void cutSeen.then(() => res.write('\r'));
      void eventYielded.then(() => res.end(endFrame('\r')));
    });
    const { url } = closeAfterTest(await listenLocally(server));
    const dx = new Verity({
      baseUrl: url,
      apiKey: KEY,
      fetch: watchingChunks((text) => {
        if (text.endsWith(`${json}\r`)) sawCut();
      }),
    });
    const stream = dx.stream('exe_1', { maxReconnects: 0, idleTimeoutMs: 10_000 });
    const events: ExecutionEvent[] = [];
    for await (const e of stream) {
      events.push(e);
      gotEvent();
    }
    expect(events).toEqual([event(1)]);
    expect(stream.endReason).toBe('settled');
  });
});
