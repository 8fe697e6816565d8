import { createApiKey, revokeApiKey } from '@verity/persistence/api-keys';
import IORedis from 'ioredis';
import { createConnection } from 'node:net';
import { z } from 'zod';
import { eventsChannel } from '@verity/queues';
import { TEST_REDIS_URL } from '../support/services';
import { API_SCHEMAS } from '../../apps/api/src/openapi';
import { DEMO, Stack, freePort, waitFor } from '../support/stack';
import { charge, http, sms, submission, unique } from '../support/http';
import { SseFrame, openStream } from './api-sse';
import { waitForLog } from './dispatcher-helpers';
import type { Execution } from '@verity/sdk';

/**
 * I11: GET /v1/executions/{id}/stream. Two API processes: executions are submitted through one and
 * streamed through the other, while the dispatcher and reconciler (separate processes) write the events.
 */

type Event = z.infer<typeof API_SCHEMAS.Event>;

describe('SSE stream', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'apistream', apis: 2 });
  });
  afterAll(async () => stack?.stop());

  const [submitVia, streamVia] = [() => stack.apiUrls[0], () => stack.apiUrls[1]];

  async function submit(operations: unknown[]): Promise<Execution> {
    const res = await http<Execution>(submitVia(), 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission(operations),
    });
    expect(res.status).toBe(201);
    return res.body;
  }

  async function allEvents(id: string): Promise<Event[]> {
    const res = await http<{ data: Event[] }>(submitVia(), 'GET', `/v1/executions/${id}/events`, { key: DEMO.agent });
    return res.body.data;
  }

  /**
   * A stream closed on the client side frees its place on the server a moment later: retry until it is free, however
   * long that takes (the test's timeout bounds it).
   */
  const openOnceAllowed = (url: string, key: string) =>
    waitFor(
      async () => {
        const s = await openStream(url, key);
        if (s.status !== 200) s.abort();
        return s;
      },
      (s) => s.status === 200,
      Infinity,
      200,
    );

  /**
   * Makes an execution waiting for an approval that never comes carry a long history (about 2 kB an event), as a
   * reviewer's thousands of re-checks would write it: `extra` events appended after its last one. Returns that last
   * seq. Settled into its wait first (the dispatcher writes nothing more to it after that), and appended under the
   * execution row's lock, as every writer does: a move racing the append would take the same seq.
   */
  async function appendLongHistory(executionId: string, extra: number): Promise<number> {
    await waitFor(
      async () =>
        (
          (await stack.db.dataSource.query(`SELECT status FROM executions WHERE id = $1`, [executionId])) as {
            status: string;
          }[]
        )[0],
      (row) => row.status === 'waiting_for_approval',
    );
    return stack.db.dataSource.transaction(async (tx) => {
      const [row] = (await tx.query(`SELECT event_seq::int AS seq FROM executions WHERE id = $1 FOR UPDATE`, [
        executionId,
      ])) as { seq: number }[];
      await tx.query(
        `INSERT INTO events (id, execution_id, tenant_id, seq, type, data)
         SELECT 'evt_slow' || substr(md5($1), 1, 8) || lpad(g::text, 6, '0'), $1, 'demo', $2::int + g, 'operation.rechecked',
                jsonb_build_object('note', repeat('x', 2000))
         FROM generate_series(1, $3::int) g`,
        [executionId, row.seq, extra],
      );
      await tx.query(`UPDATE executions SET event_seq = event_seq + $2 WHERE id = $1`, [executionId, extra]);
      return row.seq;
    });
  }

  const isEnd = (frames: SseFrame[]) => frames.some((f) => f.event === 'end');
  const eventFrames = (frames: SseFrame[]) => frames.filter((f) => f.event !== 'end');

  it('delivers every event in order, through another API process, and ends once everything has settled', async () => {
    const created = await submit([charge(unique('order')), sms(unique('sms'), { depends_on: ['charge'] })]);
    const stream = await openStream(`${streamVia()}/v1/executions/${created.id}/stream`, DEMO.agent);
    expect(stream.status).toBe(200);
    expect(stream.contentType).toMatch(/^text\/event-stream/);
    const frames = await stream.waitFor(isEnd, 45_000);
    await stream.closed;

    const events = await allEvents(created.id);
    const delivered = eventFrames(frames);
    expect(delivered.map((f) => f.id)).toEqual(events.map((e) => e.id));
    for (const [i, frame] of delivered.entries()) {
      const data = API_SCHEMAS.Event.parse(JSON.parse(frame.data));
      expect(data).toEqual(events[i]);
      expect(frame.event).toBe(events[i].type);
    }
    expect(frames[frames.length - 1]).toMatchObject({ event: 'end' });
    expect(JSON.parse(frames[frames.length - 1].data)).toEqual({ reason: 'settled' });

    // Every status change, in order: the execution's and each operation's.
    const executionChanges = delivered
      .map((f) => JSON.parse(f.data) as Event)
      .filter((e) => e.operation_id === null && e.to_status)
      .map((e) => e.to_status);
    expect(executionChanges[0]).toBe('created');
    expect(executionChanges[executionChanges.length - 1]).toBe('completed');
    const [chargeOp, smsOp] = created.operations;
    const changesOf = (opId: string) =>
      delivered.map((f) => JSON.parse(f.data) as Event).filter((e) => e.operation_id === opId && e.to_status);
    expect(changesOf(chargeOp.id).map((e) => e.to_status)).toEqual(['SENT', 'ACKNOWLEDGED', 'VERIFIED']);
    expect(changesOf(smsOp.id).map((e) => e.to_status)).toEqual(['SENT', 'ACKNOWLEDGED']);
    for (const op of [chargeOp.id, smsOp.id]) {
      const chain = changesOf(op);
      for (let i = 1; i < chain.length; i += 1) expect(chain[i].from_status).toBe(chain[i - 1].to_status);
    }
    const seqs = delivered.map((f) => (JSON.parse(f.data) as Event).seq);
    expect(seqs).toEqual(seqs.map((_, i) => i + 1));
  });

  it('wakes streams through an announcement on Redis after each commit, from the dispatcher and the reconciler', async () => {
    const subscriber = new IORedis(TEST_REDIS_URL);
    const announced: string[] = [];
    subscriber.on('message', (_channel: string, ids: string) => announced.push(...ids.split(',')));
    try {
      await subscriber.subscribe(eventsChannel(stack.prefix));
      const created = await submit([charge(unique('order'))]);
      await waitFor(
        () => http<Execution>(submitVia(), 'GET', `/v1/executions/${created.id}`, { key: DEMO.agent }),
        (r) => r.body.status === 'completed',
        30_000,
      );
      // The dispatcher's commits and the reconciler's VERIFIED (announcements within 2 ms share one message).
      await waitFor(
        async () => announced.filter((id) => id === created.id).length,
        (count) => count >= 2,
      );
    } finally {
      subscriber.disconnect();
    }
  });

  it('listens for the announcements only while one of its streams is open', async () => {
    const redis = new IORedis(TEST_REDIS_URL);
    const channel = eventsChannel(stack.prefix);
    const listeners = async () => Number(((await redis.pubsub('NUMSUB', channel)) as [string, number])[1]);
    try {
      // The streams of the other cases are gone: no API process reads the announcements.
      await waitFor(listeners, (n) => n === 0, 10_000);
      const created = await submit([charge(unique('order'), { requires_approval: true })]);
      const stream = await openStream(`${streamVia()}/v1/executions/${created.id}/stream`, DEMO.agent);
      expect(stream.status).toBe(200);
      // The process serving the stream subscribes; the other, with no stream, does not.
      await waitFor(listeners, (n) => n === 1, 10_000);
      await http(submitVia(), 'POST', `/v1/executions/${created.id}/cancel`, { key: DEMO.agent });
      const frames = await stream.waitFor(isEnd, 20_000);
      const executionMoves = eventFrames(frames)
        .map((f) => JSON.parse(f.data) as Event)
        .filter((e) => e.operation_id === null && e.to_status);
      expect(executionMoves[executionMoves.length - 1].to_status).toBe('cancelled');
      await stream.closed;
      await waitFor(listeners, (n) => n === 0, 10_000);
    } finally {
      redis.disconnect();
    }
  });

  it('resumes from Last-Event-ID on either process with no gap and no duplicate', async () => {
    const reference = unique('order');
    const created = await submit([charge(reference, { requires_approval: true }), sms(unique('sms'))]);
    const first = await openStream(`${streamVia()}/v1/executions/${created.id}/stream`, DEMO.agent);
    // Live: the approval request is written by the dispatcher after the stream opened (or just before).
    const before = await first.waitFor((f) => f.some((x) => x.event === 'approval.requested'), 30_000);
    first.abort();
    await first.closed;
    const seenFirst = eventFrames(before).slice();
    expect(seenFirst.length).toBeGreaterThan(1);

    // While nobody listens, the execution moves on.
    const approved = await http(submitVia(), 'POST', `/v1/operations/${created.operations[0].id}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'approve' },
    });
    expect(approved.status).toBe(200);
    await waitFor(
      () => http<Execution>(submitVia(), 'GET', `/v1/executions/${created.id}`, { key: DEMO.agent }),
      (r) => r.body.operations[0].status === 'VERIFIED',
      30_000,
    );

    const lastId = seenFirst[seenFirst.length - 1].id!;
    const second = await openStream(`${submitVia()}/v1/executions/${created.id}/stream`, DEMO.agent, {
      'last-event-id': lastId,
    });
    expect(second.status).toBe(200);
    const rest = eventFrames(await second.waitFor(isEnd, 45_000));
    await second.closed;

    const all = await allEvents(created.id);
    const joined = [...seenFirst, ...rest].map((f) => f.id);
    expect(new Set(joined).size).toBe(joined.length);
    expect(joined).toEqual(all.map((e) => e.id));
    expect(rest.length).toBeGreaterThan(0);

    // The `after` query parameter does the same for clients that cannot set headers.
    const viaQuery = await openStream(`${streamVia()}/v1/executions/${created.id}/stream?after=${lastId}`, DEMO.agent);
    expect(eventFrames(await viaQuery.waitFor(isEnd)).map((f) => f.id)).toEqual(rest.map((f) => f.id));
  });

  it('replays a settled execution and ends; refuses an unknown Last-Event-ID', async () => {
    const created = await submit([sms(unique('sms'))]);
    await waitFor(
      () => http<Execution>(submitVia(), 'GET', `/v1/executions/${created.id}`, { key: DEMO.agent }),
      (r) => r.body.status === 'completed',
      30_000,
    );
    const replay = await openStream(`${streamVia()}/v1/executions/${created.id}/stream`, DEMO.agent);
    const frames = await replay.waitFor(isEnd);
    await replay.closed;
    expect(eventFrames(frames).map((f) => f.id)).toEqual((await allEvents(created.id)).map((e) => e.id));

    const bad = await http<{ errors: { field: string; rule: string }[] }>(
      streamVia(),
      'GET',
      `/v1/executions/${created.id}/stream`,
      { key: DEMO.agent, headers: { 'last-event-id': 'evt_01nosuchevent' } },
    );
    expect(bad.status).toBe(400);
    expect(bad.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(bad.body.errors[0]).toMatchObject({ rule: 'known_event' });
    // A seq past the last event, as Last-Event-ID or ?after=, is no event the client was sent: refused, not waited on.
    const last = (await allEvents(created.id)).length;
    for (const resume of [
      { headers: { 'last-event-id': String(last + 1) } },
      { query: `?after=${last + 1}` },
      { query: '?after=999999999999999' },
    ]) {
      const past = await http<{ errors: { field: string; rule: string }[] }>(
        streamVia(),
        'GET',
        `/v1/executions/${created.id}/stream${resume.query ?? ''}`,
        { key: DEMO.agent, headers: resume.headers },
      );
      expect(past.status).toBe(400);
      // Named as the client sent it: the header, or the query parameter.
      const field = resume.headers ? 'Last-Event-ID' : 'after';
      expect(past.body.errors[0]).toMatchObject({ field, rule: 'known_event' });
    }
    // The last event itself resumes to the end at once.
    const atEnd = await openStream(`${streamVia()}/v1/executions/${created.id}/stream?after=${last}`, DEMO.agent);
    const rest = await atEnd.waitFor(isEnd);
    await atEnd.closed;
    expect(eventFrames(rest)).toEqual([]);
  });

  it('sends heartbeat comments and caps concurrent streams per key', async () => {
    const port = await freePort();
    await stack.startApp('api', {
      PORT: String(port),
      HOST: '127.0.0.1',
      SSE_HEARTBEAT_MS: '200',
      MAX_STREAMS_PER_KEY: '2',
    });
    const url = `http://127.0.0.1:${port}`;
    // Waits for approval that never comes: the stream stays open.
    const created = await submit([charge(unique('order'), { requires_approval: true })]);
    const path = `${url}/v1/executions/${created.id}/stream`;
    const a = await openStream(path, DEMO.agent);
    const b = await openStream(path, DEMO.agent);
    expect([a.status, b.status]).toEqual([200, 200]);
    await waitFor(
      async () => a.comments,
      (n) => n >= 3,
      20_000,
    );

    const third = await http<{ type: string }>(url, 'GET', `/v1/executions/${created.id}/stream`, { key: DEMO.agent });
    expect(third.status).toBe(429);
    expect(third.body.type).toBe('https://verity.dev/problems/too-many-streams');
    expect(Number(third.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    // Another key has its own allowance.
    const reviewer = await openStream(path, DEMO.reviewer);
    expect(reviewer.status).toBe(200);
    reviewer.abort();

    a.abort();
    await a.closed;
    const again = await openOnceAllowed(path, DEMO.agent);
    again.abort();
    b.abort();
    await http(url, 'POST', `/v1/executions/${created.id}/cancel`, { key: DEMO.agent });
  });

  it('lets go of a client that stops reading instead of holding its history in memory; it resumes from Last-Event-ID', async () => {
    const port = await freePort();
    const api = await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1', SSE_DRAIN_TIMEOUT_MS: '1000' });
    // Waits for an approval that never comes: the stream stays open. Its history is made long (about 12 MB) by events
    // written straight into the log, as a reviewer's thousands of re-checks would write them.
    const created = await submit([charge(unique('slow-reader'), { requires_approval: true })]);
    const extra = 6000;
    const written = await appendLongHistory(created.id, extra);
    const total = written + extra;

    // A client that sends its request and then reads nothing.
    const socket = createConnection(port, '127.0.0.1');
    socket.pause();
    const received: Buffer[] = [];
    const ended = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.on('error', () => undefined);
    socket.write(
      // HTTP/1.0: the body comes as it is written, with no chunk framing to read around.
      `GET /v1/executions/${created.id}/stream HTTP/1.0\r\nHost: 127.0.0.1\r\n` +
        `Authorization: Bearer ${DEMO.agent}\r\nAccept: text/event-stream\r\n\r\n`,
    );
    // The API waits for it a second, then closes the connection rather than buffering the rest.
    const lettingGo = await waitForLog(
      api,
      (line) => line.msg === 'stream closed: the client did not take what was sent' && line.executionId === created.id,
    );
    expect(Number(lettingGo.lastSentSeq)).toBeLessThan(total);
    // The client, reading now, gets what the connection carried, and then the close: never the whole history.
    socket.on('data', (chunk: Buffer) => received.push(chunk));
    socket.resume();
    await ended;
    const text = Buffer.concat(received).toString('utf8');
    expect(text).not.toContain('event: end');
    // Only frames the connection carried whole (a client dispatches an event at its blank line).
    const whole = text.slice(0, text.lastIndexOf('\n\n') + 2);
    const ids = [...whole.matchAll(/^id: (\S+)$/gm)].map((m) => m[1]);
    expect(ids.length).toBeGreaterThan(0);
    expect(ids.length).toBeLessThan(total);
    // Resumed from the last event it saw: the rest, with no gap and no duplicate. This reader reads, but on a busy
    // machine it too can fall a second behind and be let go (the drain timeout is 1 s here): it resumes again then, from
    // the last event it saw, as a client does.
    const seqs: number[] = [];
    let lastId = ids.at(-1)!;
    for (let resumes = 0; seqs.length < total - ids.length && resumes < 20; resumes += 1) {
      const resumed = await openStream(`http://127.0.0.1:${port}/v1/executions/${created.id}/stream`, DEMO.agent, {
        'last-event-id': lastId,
      });
      const wanted = total - ids.length - seqs.length;
      const frames = await resumed
        .waitFor((all) => all.filter((f) => f.id).length >= wanted, 60_000)
        .catch(() => resumed.frames);
      resumed.abort();
      const withId = frames.filter((f) => f.id);
      seqs.push(...withId.map((f) => (JSON.parse(f.data) as { seq: number }).seq));
      if (withId.length > 0) lastId = withId.at(-1)!.id!;
    }
    expect(seqs[0]).toBe(ids.length + 1);
    expect(seqs.at(-1)).toBe(total);
    expect(seqs).toHaveLength(total - ids.length);
    expect(new Set(seqs).size).toBe(seqs.length);
    await http(stack.apiUrl, 'POST', `/v1/executions/${created.id}/cancel`, { key: DEMO.agent });
  }, 120_000);

  // Revocation was checked only once a stream had caught up: a key revoked while its stream replayed a long history
  // was sent the rest of it, page after page, before key_revoked.
  it('ends a stream whose key is revoked while it replays a long history, without sending the rest', async () => {
    const port = await freePort();
    await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1', SSE_DRAIN_TIMEOUT_MS: '60000' });
    const manager = stack.db.dataSource.manager;
    const key = await createApiKey(manager, { tenantId: 'demo', role: 'agent', label: 'revoked while replaying' });
    const res = await http<Execution>(submitVia(), 'POST', '/v1/executions', {
      key: key.key,
      body: submission([charge(unique('revoked-replay'), { requires_approval: true })]),
    });
    expect(res.status).toBe(201);
    const extra = 6000;
    const total = (await appendLongHistory(res.body.id, extra)) + extra;

    // A client that takes the first bytes, then stops reading: the API waits for it to drain mid-replay.
    const socket = createConnection(port, '127.0.0.1');
    const received: Buffer[] = [];
    const ended = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.on('error', () => undefined);
    const firstBytes = new Promise<void>((resolve) =>
      socket.once('data', (chunk: Buffer) => {
        socket.pause();
        received.push(chunk);
        resolve();
      }),
    );
    socket.write(
      `GET /v1/executions/${res.body.id}/stream HTTP/1.0\r\nHost: 127.0.0.1\r\n` +
        `Authorization: Bearer ${key.key}\r\nAccept: text/event-stream\r\n\r\n`,
    );
    await firstBytes;
    expect(await revokeApiKey(manager, key.id)).toBe(true);
    socket.on('data', (chunk: Buffer) => received.push(chunk));
    socket.resume();
    await ended;
    const text = Buffer.concat(received).toString('utf8');
    expect(text).toContain('event: end\ndata: {"reason":"key_revoked"}');
    const sent = [...text.matchAll(/^id: (\S+)$/gm)].length;
    expect(sent).toBeGreaterThan(0);
    // What the connection already carried, and at most the page being written: never the whole history.
    expect(sent).toBeLessThan(total);
  });

  it('caps open streams per key across API processes: the cap is shared, not per process', async () => {
    const urls: string[] = [];
    for (let i = 0; i < 2; i += 1) {
      const port = await freePort();
      await stack.startApp('api', { PORT: String(port), HOST: '127.0.0.1', MAX_STREAMS_PER_KEY: '2' });
      urls.push(`http://127.0.0.1:${port}`);
    }
    const created = await submit([charge(unique('order'), { requires_approval: true })]);
    const path = (i: number) => `${urls[i]}/v1/executions/${created.id}/stream`;
    const onA = await openStream(path(0), DEMO.admin);
    const onB = await openStream(path(1), DEMO.admin);
    expect([onA.status, onB.status]).toEqual([200, 200]);
    // Each process has one stream of this key open; alone, each would allow a second.
    const third = await http<{ type: string }>(urls[0], 'GET', `/v1/executions/${created.id}/stream`, {
      key: DEMO.admin,
    });
    expect(third.status).toBe(429);
    expect(third.body.type).toBe('https://verity.dev/problems/too-many-streams');

    onB.abort();
    await onB.closed;
    const again = await openOnceAllowed(path(0), DEMO.admin);
    again.abort();
    onA.abort();
    await http(urls[0], 'POST', `/v1/executions/${created.id}/cancel`, { key: DEMO.agent });
  });
});
