import { AddressInfo, Socket, connect, createServer } from 'node:net';
import { TEST_REDIS_URL } from './services';

/** A TCP link to the test Redis that a test can cut for good, or hold (commands sent on it wait) and release. */
export interface RedisLink {
  url: string;
  /** Cuts every connection and refuses new ones: the client sees Redis go away. */
  sever(): Promise<void>;
  /** After sever: accepts connections again, on the same address (Redis is back). */
  mend(): Promise<void>;
  /** From now on what clients send is held back; resolves once something sent is held (a command is waiting). */
  hold(): Promise<void>;
  /** Sends on what was held, and everything after it. */
  release(): void;
}

export async function redisLink(): Promise<RedisLink> {
  const target = new URL(TEST_REDIS_URL);
  const sockets = new Set<Socket>();
  let held: { chunks: { upstream: Socket; chunk: Buffer }[]; heard: () => void } | null = null;
  const server = createServer((client) => {
    const upstream = connect(Number(target.port || 6379), target.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => sockets.delete(s));
    }
    client.on('data', (chunk: Buffer) => {
      if (!held) return void upstream.write(chunk);
      held.chunks.push({ upstream, chunk });
      held.heard();
    });
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const url = new URL(TEST_REDIS_URL);
  url.hostname = '127.0.0.1';
  url.port = String(port);
  return {
    url: url.toString(),
    sever: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const s of sockets) s.destroy();
      await closed;
    },
    mend: () => new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve)),
    hold: () =>
      new Promise<void>((resolve) => {
        held = { chunks: [], heard: resolve };
      }),
    release: () => {
      const chunks = held?.chunks ?? [];
      held = null;
      for (const { upstream, chunk } of chunks) upstream.write(chunk);
    },
  };
}
