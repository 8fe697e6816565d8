import { createServer, type Server, type ServerResponse } from 'node:http';

/**
 * A provider whose answer never ends: the status line and headers, then JSON text written for as long as the
 * connection stays open (each write waits for the socket to take the last, so nothing piles up in memory). `closed`
 * settles when the client closes the connection: the observable sign that it stopped reading, where a client that
 * reads to the end would wait for its own timeout.
 */
export function endlessAnswerServer(status: number): { server: Server; answers: number; closed: Promise<void>[] } {
  const state = { server: undefined as unknown as Server, answers: 0, closed: [] as Promise<void>[] };
  state.server = createServer((req, res) => {
    req.resume();
    state.answers += 1;
    state.closed.push(new Promise<void>((resolve) => res.on('close', () => resolve())));
    res.writeHead(status, { 'content-type': 'application/json' });
    res.write('{"id":"endless","padding":"');
    writeForever(res);
  });
  return state;
}

function writeForever(res: ServerResponse): void {
  const chunk = 'x'.repeat(16 * 1024);
  const next = () => {
    if (res.destroyed || res.writableEnded) return;
    if (res.write(chunk)) setImmediate(next);
    else res.once('drain', next);
  };
  next();
}
