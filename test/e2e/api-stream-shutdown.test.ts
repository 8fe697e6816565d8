import { execFileSync } from 'node:child_process';
import { createConnection } from 'node:net';
import { DEMO, Stack, freePort, waitFor } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { waitForLockWaiter } from '../support/lock-waits';
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
 * shutdown, and an end that cannot be flushed leaves a response that is over but unsent. Such a connection counts as
 * idle to Node, and the API closes idle connections every 100 ms while it stops (main.ts), so the stream's drain
 * timeout (SSE_DRAIN_TIMEOUT_MS, 30 s by default, longer than the 25 s SHUTDOWN_GRACE_MS) never holds the stop: exit 0
 * within seconds; the client resumes elsewhere from Last-Event-ID.
 */
describe('SIGTERM with a stream whose client stopped reading', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'apistreamstop' });
  });
  afterAll(async () => stack?.stop());

  // HTTP/1.1 too: its connection is kept alive after the response ends (HTTP/1.0's is closed with it).
  it.each(['HTTP/1.0', 'HTTP/1.1'])(
    'exits 0 within seconds, not after the drain timeout (%s)',
    async (version) => {
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
            (await stack.db.dataSource.query(`SELECT status FROM executions WHERE id = $1`, [id])) as {
              status: string;
            }[]
          )[0],
        (row) => row.status === 'waiting_for_approval',
      );
      // A long history (about 12 MB), appended under the execution row's lock as every writer of its events does.
      const extra = 6000;
      await stack.db.dataSource.transaction(async (tx) => {
        const [row] = (await tx.query(`SELECT event_seq::int AS seq FROM executions WHERE id = $1 FOR UPDATE`, [
          id,
        ])) as {
          seq: number;
        }[];
        await tx.query(
          `INSERT INTO events (id, execution_id, tenant_id, seq, type, data)
         SELECT 'evt_stop' || $4::text || lpad(g::text, 6, '0'), $1, 'demo', $2::int + g, 'operation.rechecked',
                jsonb_build_object('note', repeat('x', 2000))
         FROM generate_series(1, $3::int) g`,
          [id, row.seq, extra, version === 'HTTP/1.0' ? '0' : '1'],
        );
        await tx.query(`UPDATE executions SET event_seq = event_seq + $2 WHERE id = $1`, [id, extra]);
      });

      // A client that sends its request and then reads nothing.
      const socket = createConnection(port, '127.0.0.1');
      socket.pause();
      socket.on('error', () => undefined);
      socket.write(
        `GET /v1/executions/${id}/stream ${version}\r\nHost: 127.0.0.1\r\n` +
          `Authorization: Bearer ${DEMO.agent}\r\nAccept: text/event-stream\r\n\r\n`,
      );
      // The connection is full: bytes wait in the server's send queue that the client does not take.
      await waitFor(
        async () => unsentByServer(port),
        (unsent) => unsent > 100_000,
        20_000,
        100,
      );

      api.child.kill('SIGTERM');
      // 0: the stop finished; held by the client (its drain timeout, 30 s, is past the grace) it is the forced exit 1.
      expect(await api.exited).toBe(0);
      socket.destroy();
      await http(stack.apiUrl, 'POST', `/v1/executions/${id}/cancel`, { key: DEMO.agent });
    },
    120_000,
  );
});

/**
 * SIGTERM while a stream request is still being answered (its execution being read): `closeAll` ends the streams it
 * knows of, and this one joined them only after it had run. It was then served until its execution settled, server.close()
 * waited for it, and the API was killed by its own forced exit (exit 1) at SHUTDOWN_GRACE_MS. A stream that starts
 * once the API is stopping now ends at once (no `end` event: the client resumes elsewhere from Last-Event-ID).
 */
describe('SIGTERM while a stream is being opened', () => {
  let stack: Stack;
  beforeAll(async () => {
    // No workers: nothing but the API and this test reads or locks the executions table.
    stack = await Stack.start({ label: 'apistreamopen', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  it('ends that stream too, and exits 0 (its stop finished, not the forced exit at the grace)', async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const api = await stack.startApp('api', {
      PORT: String(port),
      HOST: '127.0.0.1',
      SHUTDOWN_GRACE_MS: '10000',
      WEBHOOK_TIMEOUT_MS: '5000',
      DATABASE_QUERY_TIMEOUT_MS: '5000',
    });
    const created = await http<Execution>(url, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('open-at-stop'), { requires_approval: true })]),
    });
    expect(created.status).toBe(201);

    // The stream's first read of its execution waits on a lock this test holds.
    const lock = stack.db.dataSource.createQueryRunner();
    await lock.connect();
    await lock.startTransaction();
    await lock.query(`LOCK TABLE executions IN ACCESS EXCLUSIVE MODE`);
    const opening = fetch(`${url}/v1/executions/${created.body.id}/stream`, {
      headers: { authorization: `Bearer ${DEMO.agent}` },
    });
    opening.catch(() => undefined);
    await waitForLockWaiter(stack.db.dataSource, { statementLike: '%executions%' });

    api.child.kill('SIGTERM');
    await waitFor(
      async () => api.output.join(''),
      (out) => out.includes('"shutting down"'),
    );
    await lock.commitTransaction();
    await lock.release();

    const code = await api.exited;
    if (code !== 0) console.log(api.output.join('').slice(-4000));
    // 0: the stop finished; the stream served on held it until the forced exit 1 at the grace.
    expect(code).toBe(0);
    // The stream was ended, not cut: its body reads to its end, without an `end` event (the client resumes).
    const stream = await opening;
    expect(stream.status).toBe(200);
    const text = await stream.text();
    expect(text).toContain('retry:');
    expect(text).not.toContain('event: end');
  }, 60_000);

  it('ends an open stream whose read of the log is under way, writes nothing after the end, and exits 0', async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const api = await stack.startApp('api', {
      PORT: String(port),
      HOST: '127.0.0.1',
      SHUTDOWN_GRACE_MS: '10000',
      WEBHOOK_TIMEOUT_MS: '5000',
      DATABASE_QUERY_TIMEOUT_MS: '5000',
      SSE_HEARTBEAT_MS: '200',
    });
    const created = await http<Execution>(url, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('read-at-stop'), { requires_approval: true })]),
    });
    expect(created.status).toBe(201);
    const id = created.body.id;
    const stream = await fetch(`${url}/v1/executions/${id}/stream`, {
      headers: { authorization: `Bearer ${DEMO.agent}` },
    });
    expect(stream.status).toBe(200);
    const reader = stream.body!.getReader();
    let received = '';
    const decoder = new TextDecoder();
    while (!received.includes('id: ')) received += decoder.decode((await reader.read()).value);

    // The stream's next read of the log (a heartbeat asks for one) waits on a lock this test holds, in whose
    // transaction one more event of the execution is written: the read answers it only once the stream was ended.
    const lock = stack.db.dataSource.createQueryRunner();
    await lock.connect();
    await lock.startTransaction();
    await lock.query(`LOCK TABLE events IN ACCESS EXCLUSIVE MODE`);
    const [{ seq }] = (await lock.query(`SELECT event_seq::int AS seq FROM executions WHERE id = $1 FOR UPDATE`, [
      id,
    ])) as { seq: number }[];
    await lock.query(
      `INSERT INTO events (id, execution_id, tenant_id, seq, type, data)
       VALUES ('evt_readatstop' || $3::text, $1, 'demo', $2::int + 1, 'operation.rechecked', '{}'::jsonb)`,
      [id, seq, seq],
    );
    await lock.query(`UPDATE executions SET event_seq = event_seq + 1 WHERE id = $1`, [id]);
    await waitForLockWaiter(stack.db.dataSource, { statementLike: '%events%' });

    api.child.kill('SIGTERM');
    // The stream is ended (its body reads to its end) while its read still waits.
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) break;
      received += decoder.decode(chunk.value);
    }
    await lock.commitTransaction();
    await lock.release();

    const code = await api.exited;
    if (code !== 0) console.log(api.output.join('').slice(-4000));
    expect(code).toBe(0);
    expect(api.output.join('')).not.toContain('ERR_STREAM_WRITE_AFTER_END');
    expect(received).not.toContain('evt_readatstop');
  }, 60_000);
});
