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
