import { AddressInfo, Socket, createConnection, createServer } from 'node:net';
import { drained } from './drained';

/** A real TCP pair: the server side's socket (what a stream writes to) and a client that reads only when told. */
async function pair(): Promise<{ server: Socket; client: Socket; close: () => Promise<void> }> {
  const listener = createServer();
  const accepted = new Promise<Socket>((resolve) => listener.once('connection', resolve));
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
  const client = createConnection((listener.address() as AddressInfo).port, '127.0.0.1');
  client.pause();
  const server = await accepted;
  return {
    server,
    client,
    close: async () => {
      client.destroy();
      server.destroy();
      await new Promise<void>((resolve) => listener.close(() => resolve()));
    },
  };
}

/** Writes until the socket's buffer is full, as a stream does for a client that stopped reading. */
function fill(out: Socket): void {
  const chunk = Buffer.alloc(256 * 1024, 'x');
  for (let i = 0; i < 400 && out.write(chunk); i += 1);
  expect(out.writableNeedDrain).toBe(true);
}

/** Runs `check` on a fresh pair, closed afterwards whatever happens. */
async function withPair(check: (p: { server: Socket; client: Socket }) => Promise<void>): Promise<void> {
  const { server, client, close } = await pair();
  try {
    await check({ server, client });
  } finally {
    await close();
  }
}

describe('drained: backpressure for a client that reads at its own pace', () => {
  it('is true at once when nothing waits to be taken', () =>
    withPair(async ({ server }) => {
      expect(await drained(server, 50)).toBe(true);
    }));

  it('is false when the client takes nothing within the time given (the stream then lets it go)', () =>
    withPair(async ({ server }) => {
      fill(server);
      expect(await drained(server, 300)).toBe(false);
      expect(server.listenerCount('drain')).toBe(0);
    }));

  it('is true once the client reads what was written', () =>
    withPair(async ({ server, client }) => {
      fill(server);
      const waited = drained(server, 20_000);
      client.resume();
      expect(await waited).toBe(true);
    }));

  it('is false when the connection closes while it waits', () =>
    withPair(async ({ server }) => {
      fill(server);
      const waited = drained(server, 20_000);
      server.destroy();
      expect(await waited).toBe(false);
    }));
});
