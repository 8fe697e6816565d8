import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A test's own HTTP server, listening on a spare loopback port. */
export interface LocalServer {
  /** `http://127.0.0.1:<port>` */
  url: string;
  port: number;
  /** Drops every connection (keep-alive ones too) and stops listening. */
  close: () => Promise<void>;
}

/** Starts `server` on a spare port of 127.0.0.1 (a real server: no HTTP mock stands in for a third party). */
export async function listenLocally(server: Server): Promise<LocalServer> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/**
 * A loopback server for every test of the enclosing describe: `create()` builds it before the first test, and it is
 * closed after the last. Read its url and port only inside hooks and tests, once it listens.
 */
export function serveDuringDescribe(create: () => Server): LocalServer {
  let local: LocalServer | undefined;
  beforeAll(async () => {
    local = await listenLocally(create());
  });
  afterAll(async () => local?.close());
  const listening = (): LocalServer => {
    if (!local) throw new Error('the local server is used before its beforeAll ran');
    return local;
  };
  return {
    get url() {
      return listening().url;
    },
    get port() {
      return listening().port;
    },
    close: () => listening().close(),
  };
}

/**
 * Servers that the tests of the enclosing describe (or file) start one each: every server handed to the returned
 * function is closed after the test, however it ended, so the test needs no try/finally of its own.
 */
export function closedAfterEachTest(): <T extends LocalServer>(server: T) => T {
  const open: LocalServer[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((server) => server.close()));
  });
  return (server) => {
    open.push(server);
    return server;
  };
}

/** Resolves once `condition` holds, checked every few milliseconds (jest's timeout bounds the wait). */
export async function waitUntil(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 5));
}
