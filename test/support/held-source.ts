import { createServer, type ServerResponse } from 'node:http';
import { listenLocally, waitUntil, type LocalServer } from './local-server';

/**
 * A source on loopback (a provider's API, as the sandbox connector calls it) for every test of the enclosing describe,
 * whose every request is held until the test answers it: the reads of two jobs can be made to overlap and end in a
 * chosen order. It listens before the first test (a `beforeAll` registered here, so one declared after this call can
 * read `url`); what is still held is dropped and the server closed after the last.
 */
export function heldSourceDuringDescribe() {
  /** Every request so far, in the order they arrived (answered ones included): the `i` of `unreachable`. */
  const held: ServerResponse[] = [];
  let local: LocalServer | undefined;
  beforeAll(async () => {
    local = await listenLocally(
      createServer((req, res) => {
        req.resume();
        held.push(res);
      }),
    );
  });
  afterAll(async () => {
    for (const res of held) res.destroy();
    await local?.close();
  });
  return {
    held,
    /** `http://127.0.0.1:<port>`, once it listens. */
    get url(): string {
      if (!local) throw new Error('the source is used before its beforeAll ran');
      return local.url;
    },
    /** Starts `read` and resolves once its request to the source has arrived and is held (its outcome still to come). */
    async readArrived<T>(read: () => Promise<T>): Promise<{ running: Promise<T> }> {
      const before = held.length;
      const running = read();
      await waitUntil(() => held.length > before);
      return { running };
    },
    /** Answers the `i`-th request held: the source is unreachable (503). */
    unreachable(i: number): void {
      held[i].writeHead(503, { 'content-type': 'application/json' }).end('{}');
    },
  };
}
