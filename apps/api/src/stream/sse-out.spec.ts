import { AddressInfo, Socket, createConnection } from 'node:net';
import { ServerResponse, createServer } from 'node:http';
import { writeEnd, writeEvent, writeHeartbeat } from './sse-out';

/**
 * A real HTTP server whose one response is an open event stream, and a client that reads nothing: what the stream
 * writes piles up, as it does for a client that stopped reading. Every 'error' the response emits is collected (in the
 * API nothing listens for one: it would be an uncaught exception).
 */
async function openStream(): Promise<{ res: ServerResponse; errors: Error[]; close: () => Promise<void> }> {
  let client: Socket | null = null;
  const server = createServer();
  const answered = new Promise<ServerResponse>((resolve) => server.once('request', (_req, res) => resolve(res)));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  client = createConnection((server.address() as AddressInfo).port, '127.0.0.1');
  client.write('GET /stream HTTP/1.1\r\nHost: localhost\r\n\r\n');
  client.pause();
  const res = await answered;
  const errors: Error[] = [];
  res.on('error', (error) => errors.push(error));
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.write('retry: 1000\n\n');
  return {
    res,
    errors,
    close: async () => {
      client?.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Writes until the response's buffer is full, as a long replay to a client that stopped reading does. */
function fill(res: ServerResponse): void {
  const chunk = ': ' + 'x'.repeat(256 * 1024) + '\n\n';
  for (let i = 0; i < 400 && res.write(chunk); i += 1);
  expect(res.writableNeedDrain).toBe(true);
}

const view = { id: 'evt_1', type: 'operation.sent', seq: 1 };

describe('sse-out: writes on a stream that shutdown has ended', () => {
  it('writes nothing once the response was ended and its end not yet taken by the client (no write-after-end)', async () => {
    const { res, errors, close } = await openStream();
    try {
      fill(res);
      // SIGTERM: closeAll ends the response. The client has not taken what was sent, so it is ended, not finished:
      // not destroyed, no 'close' yet — the page being written and the next heartbeat still reach it.
      res.end();
      expect(res.writableEnded).toBe(true);
      expect(res.destroyed).toBe(false);
      writeHeartbeat(res);
      expect(writeEvent(res, view)).toBe(false);
      writeEnd(res, 'settled');
      await new Promise((resolve) => setImmediate(resolve));
      expect(errors.map((e) => (e as NodeJS.ErrnoException).code)).toEqual([]);
    } finally {
      await close();
    }
  });

  it('writes nothing to a response destroyed under it', async () => {
    const { res, errors, close } = await openStream();
    try {
      res.destroy();
      writeHeartbeat(res);
      expect(writeEvent(res, view)).toBe(false);
      writeEnd(res, 'settled');
      await new Promise((resolve) => setImmediate(resolve));
      expect(errors).toEqual([]);
    } finally {
      await close();
    }
  });

  it('writes to a response still open', async () => {
    const { res, errors, close } = await openStream();
    try {
      const before = res.socket?.bytesWritten ?? 0;
      expect(writeEvent(res, view)).toBe(true);
      writeHeartbeat(res);
      writeEnd(res, 'settled');
      await new Promise((resolve) => res.socket!.write('', resolve));
      expect(res.socket!.bytesWritten).toBeGreaterThan(before);
      expect(errors).toEqual([]);
    } finally {
      await close();
    }
  });
});
