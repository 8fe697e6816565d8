import { execFileSync } from 'node:child_process';
import { createConnection } from 'node:net';
import { DEMO, Stack, freePort, waitFor } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import type { Execution } from '@verity/sdk';

/** Bytes the server's sockets on this port hold unsent (their Send-Q). */
function unsentByServer(port: number): number {
  return execFileSync('ss', ['-tnH', 'state', 'established', `( sport = :${port} )`])
    .toString()
    .trim()
    .split('\n')
    .filter(Boolean)
    .reduce((sum, line) => sum + Number(line.trim().split(/\s+/)[1]), 0);
}

/**
 * SIGTERM with a stream open to a client that stopped reading (its socket full): the API ends every stream on
 * shutdown, but an end that cannot be flushed kept the connection, and server.close() with it, until the stream's
 * drain timeout (SSE_DRAIN_TIMEOUT_MS, 30 s by default) — past the 25 s forced exit, so exit 1. Now the API stops at
 * once with exit 0; the client resumes elsewhere from Last-Event-ID.
 */
describe('SIGTERM with a stream whose client stopped reading', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'apistreamstop' });
  });
  afterAll(async () => stack?.stop());

  it('exits 0 within seconds, not after the drain timeout', async () => {
    const port = await freePort();
    const api = await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1' });
    const created = await http<Execution>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('stop-reading'), { requires_approval: true })]),
    });
    expect(created.status).toBe(201);
    const id = created.body.id;
    await waitFor(
      async () =>
        (
          (await stack.db.dataSource.query(`SELECT status FROM executions WHERE id = $1`, [id])) as { status: string }[]
        )[0],
      (row) => row.status === 'waiting_for_approval',
    );
    // A long history (about 12 MB), appended under the execution row's lock as every writer of its events does.
    const extra = 6000;
    await stack.db.dataSource.transaction(async (tx) => {
      const [row] = (await tx.query(`SELECT event_seq::int AS seq FROM executions WHERE id = $1 FOR UPDATE`, [id])) as {
        seq: number;
      }[];
      await tx.query(
        `INSERT INTO events (id, execution_id, tenant_id, seq, type, data)
         SELECT 'evt_stop' || lpad(g::text, 6, '0'), $1, 'demo', $2::int + g, 'operation.rechecked',
                jsonb_build_object('note', repeat('x', 2000))
         FROM generate_series(1, $3::int) g`,
        [id, row.seq, extra],
      );
      await tx.query(`UPDATE executions SET event_seq = event_seq + $2 WHERE id = $1`, [id, extra]);
    });

    // A client that sends its request and then reads nothing.
    const socket = createConnection(port, '127.0.0.1');
    socket.pause();
    socket.on('error', () => undefined);
    socket.write(
      `GET /v1/executions/${id}/stream HTTP/1.0\r\nHost: 127.0.0.1\r\n` +
        `Authorization: Bearer ${DEMO.agent}\r\nAccept: text/event-stream\r\n\r\n`,
    );
    // The connection is full: bytes wait in the server's send queue that the client does not take.
    await waitFor(
      async () => unsentByServer(port),
      (unsent) => unsent > 100_000,
      20_000,
      100,
    );

    const stopping = Date.now();
    api.child.kill('SIGTERM');
    expect(await api.exited).toBe(0);
    expect(Date.now() - stopping).toBeLessThan(10_000);
    socket.destroy();
    await http(stack.apiUrl, 'POST', `/v1/executions/${id}/cancel`, { key: DEMO.agent });
  }, 120_000);
});
