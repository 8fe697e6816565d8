import { IncomingHttpHeaders, request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { DEMO, Stack } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { expectDescribed } from '../support/openapi-validator';
import { seededRandom } from '../support/seeded-random';
import { SseStream, openStream } from './api-sse';

type Answer = { status: number; type: string; first: string; headers: IncomingHttpHeaders };

const CAP = 4;
// Leases live three heartbeats (a minute here): a slot that comes back within the wait below was released, not expired.
const HEARTBEAT_MS = 20_000;
const FREE_WITHIN_MS = 15_000;

type Departure =
  | { how: 'reset'; afterMs: number }
  | { how: 'reset-mid-request'; afterMs: number }
  | { how: 'reset-after-first-bytes' }
  | { how: 'abort-fetch'; afterMs: number }
  | { how: 'abort-fetch-after-headers' };

/** A stream request over a raw socket that the client then resets (TCP RST): before, during or after the setup. */
function rawStreamThenReset(port: number, path: string, key: string, departure: Departure): Promise<void> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.on('error', () => undefined);
    socket.once('close', () => resolve());
    const request = `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${key}\r\nAccept: text/event-stream\r\n\r\n`;
    socket.once('connect', () => {
      if (departure.how === 'reset-mid-request') {
        socket.write(request.slice(0, request.length / 2));
        setTimeout(() => socket.resetAndDestroy(), departure.afterMs);
        return;
      }
      socket.write(request);
      if (departure.how === 'reset') setTimeout(() => socket.resetAndDestroy(), departure.afterMs);
      else socket.once('data', () => socket.resetAndDestroy());
    });
  });
}

async function fetchThenAbort(url: string, key: string, departure: Departure): Promise<void> {
  const controller = new AbortController();
  const headers = { authorization: `Bearer ${key}`, accept: 'text/event-stream' };
  if (departure.how === 'abort-fetch') setTimeout(() => controller.abort(), departure.afterMs);
  try {
    await fetch(url, { headers, signal: controller.signal });
  } catch {
    // Aborted before the answer: that is the point.
  }
  controller.abort();
}

/**
 * Open streams per key are capped across API processes by leases in Redis. A client that goes away at any moment —
 * before the lease is taken, while it is being taken, after the first bytes — must give its slot back at once;
 * otherwise the heartbeat renews an orphaned lease until the execution settles and the key cannot open a stream.
 */
describe('SSE stream slots are released whenever the client goes away', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({
      label: 'streamrelease',
      env: { MAX_STREAMS_PER_KEY: String(CAP), SSE_HEARTBEAT_MS: String(HEARTBEAT_MS) },
    });
  });
  afterAll(async () => stack?.stop());

  it('after 40 requests abandoned at random points, the key opens its full quota again (and no more)', async () => {
    const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      // Waits for an approval that never comes: nothing settles, so only a release frees a slot.
      body: submission([charge(unique('order'), { requires_approval: true })]),
    });
    expect(created.status).toBe(201);
    const path = `/v1/executions/${created.body.id}/stream`;
    const url = `${stack.apiUrl}${path}`;
    const port = Number(new URL(stack.apiUrl).port);

    const seed = Date.now() % 1_000_000;
    const next = seededRandom(seed);
    const departures: Departure[] = Array.from({ length: 40 }, (_, i): Departure => {
      const afterMs = Math.floor(next() * 40);
      return (
        [
          { how: 'reset', afterMs },
          { how: 'reset-mid-request', afterMs },
          { how: 'reset-after-first-bytes' },
          { how: 'abort-fetch', afterMs },
          { how: 'abort-fetch-after-headers' },
        ] as const
      )[i % 5];
    });
    // In waves of ten at once, so the cap is contended while clients leave.
    for (let wave = 0; wave < 4; wave += 1) {
      await Promise.all(
        departures
          .slice(wave * 10, wave * 10 + 10)
          .map((d) =>
            d.how.startsWith('abort-fetch')
              ? fetchThenAbort(url, DEMO.agent, d)
              : rawStreamThenReset(port, path, DEMO.agent, d),
          ),
      );
    }

    // The full quota opens again, within a time well under a lease's life; a 429 means a slot is still held.
    const open: SseStream[] = [];
    const deadline = Date.now() + FREE_WITHIN_MS;
    let lastStatus = 0;
    while (open.length < CAP && Date.now() < deadline) {
      const stream = await openStream(url, DEMO.agent);
      lastStatus = stream.status;
      if (stream.status === 200) open.push(stream);
      else {
        stream.abort();
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    if (open.length < CAP) {
      throw new Error(
        `only ${open.length} of ${CAP} streams could open within ${FREE_WITHIN_MS} ms (last answer ${lastStatus}); ` +
          `seed ${seed}, departures ${JSON.stringify(departures)}`,
      );
    }
    // The cap still holds: releases freed exactly the slots of those who left.
    const beyond = await openStream(url, DEMO.agent);
    expect(beyond.status).toBe(429);
    beyond.abort();

    for (const stream of open) stream.abort();
    await Promise.all(open.map((s) => s.closed));
    await http(stack.apiUrl, 'POST', `/v1/executions/${created.body.id}/cancel`, { key: DEMO.agent });
  });

  // Found by the fuzz (test/fuzz): the JSON parser reads such a body to its end, after which Node marks the request
  // destroyed and emits its 'close'; taken for a departure, the stream returned without a word and the client hung.
  it('answers a stream request that carries a JSON body: a body read to its end is not a client leaving', async () => {
    const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(unique('with-body'), { requires_approval: true })]),
    });
    expect(created.status).toBe(201);
    const url = new URL(stack.apiUrl);
    // An empty object is no body (RefuseUnreadBody lets it through), yet the parser reads it to its end: the stream
    // is served. A body that says something is refused at once, in words (the stream reads none: `after` is a query).
    for (const body of ['{}', '{"after":"x"}']) {
      const answer = await new Promise<Answer>((resolve, reject) => {
        const req = httpRequest(
          {
            host: url.hostname,
            port: url.port,
            method: 'GET',
            path: `/v1/executions/${created.body.id}/stream`,
            headers: {
              authorization: `Bearer ${DEMO.agent}`,
              'content-type': 'application/json',
              'content-length': String(Buffer.byteLength(body)),
            },
          },
          (res) => {
            res.once('data', (chunk: Buffer) => {
              const type = String(res.headers['content-type']);
              resolve({ status: res.statusCode ?? 0, type, first: String(chunk), headers: res.headers });
              req.destroy();
            });
          },
        );
        req.on('error', reject);
        req.end(body);
      });
      if (body !== '{}') {
        expect(answer).toMatchObject({ status: 400, type: expect.stringMatching(/^application\/problem\+json/) });
        expect(JSON.parse(answer.first)).toMatchObject({ errors: [expect.objectContaining({ rule: 'no_body' })] });
        continue;
      }
      expect(answer).toMatchObject({ status: 200, type: expect.stringMatching(/^text\/event-stream/) });
      // A raw request, which the fetch wrapper does not see (and the stream's body is never read).
      await expectDescribed('GET', `${url.origin}/v1/executions/${created.body.id}/stream`, answer);
      expect(answer.first).toMatch(/^retry: /);
    }
    await http(stack.apiUrl, 'POST', `/v1/executions/${created.body.id}/cancel`, { key: DEMO.agent });
  }, 20_000);
});
