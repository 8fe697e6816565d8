import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { ClientRequest, createServer } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { httpExchange } from './http-exchange';
import { endlessAnswerServer } from '../../../test/support/endless-answer';
import { serveDuringDescribe } from '../../../test/support/local-server';

/** The client sockets httpExchange's requests ran on, seen through Node's public HTTP client diagnostics channel. */
function watchClientSockets(): { sockets: Set<Socket>; stop: () => void } {
  const sockets = new Set<Socket>();
  const onStart = (message: unknown) => {
    const { request } = message as { request: ClientRequest };
    // Published when the request is ended, by which time a reused socket may already be assigned.
    if (request.socket) sockets.add(request.socket);
    else request.once('socket', (socket: Socket) => sockets.add(socket));
  };
  subscribe('http.client.request.start', onStart);
  return { sockets, stop: () => unsubscribe('http.client.request.start', onStart) };
}

describe('httpExchange on a reused keep-alive socket', () => {
  let connections = 0;
  const local = serveDuringDescribe(() => {
    const server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"ok":true}');
      });
    });
    server.keepAliveTimeout = 30_000;
    server.on('connection', () => (connections += 1));
    return server;
  });

  it('adds no connect listener per request: 50 sequential requests leave at most one, and no warning', async () => {
    const warnings: Error[] = [];
    const onWarning = (warning: Error) => warnings.push(warning);
    process.on('warning', onWarning);
    const watch = watchClientSockets();
    const url = `${local.url}/x`;
    try {
      for (let i = 0; i < 50; i += 1) {
        const result = await httpExchange({ method: 'POST', url, body: { i }, timeoutMs: 5_000 });
        expect(result).toMatchObject({ kind: 'response', status: 200, body: { ok: true } });
      }
      // One socket carried every request, so the test is about reuse and not about fresh connections.
      expect(connections).toBe(1);
      expect(watch.sockets.size).toBe(1);
      const [socket] = [...watch.sockets];
      expect(socket.listenerCount('connect')).toBeLessThanOrEqual(1);
      expect(socket.listenerCount('secureConnect')).toBe(0);
      // A warning is emitted asynchronously; one more exchange gives it a turn of the event loop to arrive.
      await httpExchange({ method: 'GET', url, timeoutMs: 5_000 });
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings.filter((w) => w.name === 'MaxListenersExceededWarning')).toEqual([]);
    } finally {
      watch.stop();
      process.off('warning', onWarning);
    }
  });

  it('still tells a request never written (refused) from one that may have been (timeout after connecting)', async () => {
    // A closed port: the connection is refused, so the request was provably never written.
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const port = (probe.address() as AddressInfo).port;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const refused = await httpExchange({ method: 'POST', url: `http://127.0.0.1:${port}/x`, timeoutMs: 5_000 });
    expect(refused).toMatchObject({ kind: 'not_delivered', code: 'ECONNREFUSED' });

    // A server that accepts and never answers: the request went out, so the timeout is ambiguous.
    const silent = createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const silentUrl = `http://127.0.0.1:${(silent.address() as AddressInfo).port}/x`;
      const timedOut = await httpExchange({ method: 'POST', url: silentUrl, body: {}, timeoutMs: 200 });
      expect(timedOut).toMatchObject({ kind: 'ambiguous', code: 'ETIMEDOUT' });
    } finally {
      silent.closeAllConnections();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });
});

describe('httpExchange of an answer past its size limit', () => {
  const provider = endlessAnswerServer(201);
  const local = serveDuringDescribe(() => provider.server);

  it('stops reading at the limit and closes the connection: the answer is "too large", not a timeout', async () => {
    // The timeout is far beyond the test's own: only an exchange that stops at the limit answers within it.
    const result = await httpExchange({ method: 'POST', url: `${local.url}/x`, body: {}, timeoutMs: 60_000 });
    expect(result).toMatchObject({ kind: 'response', status: 201, truncated: true, body: undefined });
    // The provider sees its connection closed: nothing more of the answer is read (or waited for).
    await provider.closed[0];
  }, 20_000);
});

describe('httpExchange of JSON that opens with a byte order mark', () => {
  const local = serveDuringDescribe(() =>
    createServer((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json' }).end('\ufeff{"id":"ch_1","status":"ok"}');
    }),
  );

  it('reads it as the JSON after the mark (it reads one way), and hands on that text', async () => {
    const result = await httpExchange({ method: 'GET', url: `${local.url}/x`, timeoutMs: 5_000 });
    expect(result).toMatchObject({ kind: 'response', status: 200, body: { id: 'ch_1', status: 'ok' } });
    expect(result.kind === 'response' && result.json).toBe('{"id":"ch_1","status":"ok"}');
  });
});

describe('httpExchange of JSON whose text is no UTF-8', () => {
  // `{"id":"ch_` then the bytes FF FE (no UTF-8 character), then `1"}`: read leniently, as `{"id":"ch_\uFFFD\uFFFD1"}`,
  // which another answer (other bytes, or the replacement character written out) reads as too — not what was sent.
  const answer = Buffer.concat([Buffer.from('{"id":"ch_'), Buffer.from([0xff, 0xfe]), Buffer.from('1"}')]);
  const local = serveDuringDescribe(() =>
    createServer((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json' }).end(answer);
    }),
  );

  it('reads no JSON from it (JSON text is UTF-8): no body and no text, where it read the id with U+FFFD in it', async () => {
    const result = await httpExchange({ method: 'GET', url: `${local.url}/x`, timeoutMs: 5_000 });
    expect(result).toMatchObject({ kind: 'response', status: 200, truncated: false });
    expect(result.kind === 'response' && result.body).toBeUndefined();
    expect(result.kind === 'response' && result.json).toBeUndefined();
  });
});
