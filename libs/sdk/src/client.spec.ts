import { createServer, IncomingMessage, ServerResponse } from 'node:http';
import { Verity } from './client';
import {
  VerityConditionError,
  VerityConflictError,
  VerityNetworkError,
  VerityServerError,
  VerityTimeoutError,
} from './errors';
import type { Execution, SubmissionRequest } from './types';
import { closedAfterEachTest, listenLocally, waitUntil } from '../../../test/support/local-server';
import { UNIT_SUBMISSION } from '../../../test/support/http';

const KEY = 'sk-test-secret-key-456';

interface Seen {
  method: string;
  url: string;
  idempotencyKey: string | undefined;
  body: string;
}

type Handler = (req: IncomingMessage, res: ServerResponse, body: string, n: number) => void;

const closeAfterTest = closedAfterEachTest();

/**
 * A real HTTP server, closed after the test; the handler decides per request whether to answer or drop the connection.
 */
async function listen(handler: Handler) {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString();
      seen.push({
        method: req.method!,
        url: req.url!,
        idempotencyKey: req.headers['idempotency-key'] as string | undefined,
        body,
      });
      handler(req, res, body, seen.length);
    });
  });
  return closeAfterTest({ ...(await listenLocally(server)), seen });
}

/** The connection is cut after the request arrived: the client cannot know whether it was carried out. */
function drop(req: IncomingMessage): void {
  req.socket.destroy();
}

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

const SUBMISSION: SubmissionRequest = UNIT_SUBMISSION;

function fakeExecution(id: string, status = 'created', opStatus = 'PREPARED'): Execution {
  return {
    id,
    agent_id: 'unit',
    intent: 'charge',
    status,
    effects: { summary: 'unknown', counts: {} },
    operations: [{ id: 'op_1', status: opStatus, verification_method: 'read_after_write' }],
  } as unknown as Execution;
}

/**
 * A tiny idempotent intake: the first request for a key "commits" and then loses its connection; later requests
 * with the same key get the committed execution back, flagged as a replay, as the real API does (I8).
 */
function idempotentIntake(dropFirst: number) {
  const byKey = new Map<string, { id: string; body: string }>();
  let created = 0;
  const handler: Handler = (req, res, body, n) => {
    const key = req.headers['idempotency-key'] as string;
    const existing = byKey.get(key);
    if (existing && existing.body !== body) {
      json(res, 422, { type: 'https://verity.dev/problems/idempotency-key-reused', title: 'x', status: 422 });
      return;
    }
    if (!existing) {
      created += 1;
      byKey.set(key, { id: `exe_${created}`, body });
    }
    if (n <= dropFirst) {
      drop(req);
      return;
    }
    json(res, 201, fakeExecution(byKey.get(key)!.id), existing ? { 'idempotent-replayed': 'true' } : {});
  };
  return { handler, created: () => created };
}

describe('create: idempotent retry over a real dropped connection', () => {
  it('retries a dropped create with the same generated key and gets the one execution back', async () => {
    const intake = idempotentIntake(1);
    const server = await listen(intake.handler);
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY, backoffMs: 5 });
    const result = await dx.executions.createWithMeta(SUBMISSION);
    expect(result.execution.id).toBe('exe_1');
    expect(result.replayed).toBe(true);
    expect(result.attempts).toBe(2);
    expect(result.idempotencyKey).toMatch(/^[0-9a-f-]{36}$/);
    expect(server.seen).toHaveLength(2);
    expect(server.seen.map((s) => s.idempotencyKey)).toEqual([result.idempotencyKey, result.idempotencyKey]);
    expect(server.seen[0].body).toBe(server.seen[1].body);
    expect(intake.created()).toBe(1);
  });

  it("uses the caller's key verbatim, and a fresh key per call otherwise", async () => {
    const intake = idempotentIntake(0);
    const server = await listen(intake.handler);
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY, backoffMs: 5 });
    const first = await dx.executions.createWithMeta(SUBMISSION, { idempotencyKey: 'order-1-charge' });
    const again = await dx.executions.createWithMeta(SUBMISSION, { idempotencyKey: 'order-1-charge' });
    expect([first.replayed, again.replayed]).toEqual([false, true]);
    expect(again.execution.id).toBe(first.execution.id);
    const plain = await dx.executions.create(SUBMISSION);
    const other = await dx.executions.create(SUBMISSION);
    expect(plain.id).not.toBe(other.id);
    expect(server.seen.map((s) => s.idempotencyKey).slice(0, 2)).toEqual(['order-1-charge', 'order-1-charge']);
  });

  it('waits out an in-flight answer for the same key, then takes the replay', async () => {
    const server = await listen((_req, res, _body, n) => {
      if (n === 1) drop(_req);
      else if (n === 2)
        json(res, 409, {
          type: 'https://verity.dev/problems/idempotency-key-in-flight',
          title: 'Conflict with the current state',
          status: 409,
        });
      else json(res, 201, fakeExecution('exe_9'), { 'idempotent-replayed': 'true' });
    });
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY, backoffMs: 5 });
    const result = await dx.executions.createWithMeta(SUBMISSION);
    expect(result).toMatchObject({ replayed: true, attempts: 3 });
    expect(new Set(server.seen.map((s) => s.idempotencyKey)).size).toBe(1);
  });

  it('gives up after 3 attempts with a network error that names the key to repeat with', async () => {
    const intake = idempotentIntake(Infinity);
    const server = await listen(intake.handler);
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY, backoffMs: 5 });
    const error = (await dx.executions.create(SUBMISSION, { idempotencyKey: 'k-1' }).catch((e: unknown) => e)) as
      VerityNetworkError | undefined;
    expect(error).toBeInstanceOf(VerityNetworkError);
    expect(error).toMatchObject({ attempts: 3, outcomeUnknown: true, idempotencyKey: 'k-1', method: 'POST' });
    expect(error!.message).toContain('same Idempotency-Key');
    expect(error!.message).not.toContain(KEY);
    expect(server.seen).toHaveLength(3);
    expect(intake.created()).toBe(1);
  });
});

describe('create: an answer that does not settle whether it was accepted', () => {
  it('a 503 after a dropped first attempt carries the key and outcomeUnknown, like a network error', async () => {
    const intake = idempotentIntake(1);
    const server = await listen((req, res, body, n) => {
      if (n === 1) return intake.handler(req, res, body, n);
      json(res, 503, { type: 'about:blank', title: 'Service unavailable', status: 503 });
    });
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY, backoffMs: 5 });
    const error = (await dx.executions.create(SUBMISSION).catch((e: unknown) => e)) as VerityServerError;
    expect(error).toBeInstanceOf(VerityServerError);
    expect(intake.created()).toBe(1);
    expect(error).toMatchObject({ status: 503, outcomeUnknown: true, idempotencyKey: server.seen[0].idempotencyKey });
    expect(error.message).toContain('same Idempotency-Key');
  });

  it('a 500 on a cancel may have been carried out: outcomeUnknown, never repeated', async () => {
    const server = await listen((req, res) => json(res, 500, { type: 'about:blank', title: 'Internal', status: 500 }));
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY, backoffMs: 5 });
    const error = (await dx.executions.cancel('exe_1').catch((e: unknown) => e)) as VerityServerError;
    expect(error).toMatchObject({ status: 500, outcomeUnknown: true, idempotencyKey: undefined });
    expect(server.seen).toHaveLength(1);
  });

  it('a 201 whose body is not JSON was carried out: outcomeUnknown with the key, not a bare server error', async () => {
    const server = await listen((req, res) => {
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end('{"id":"exe_1","status":');
    });
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY, backoffMs: 5 });
    const error = (await dx.executions
      .create(SUBMISSION, { idempotencyKey: 'k-201' })
      .catch((e: unknown) => e)) as VerityServerError;
    expect(error).toBeInstanceOf(VerityServerError);
    expect(error).toMatchObject({ status: 201, outcomeUnknown: true, idempotencyKey: 'k-201' });
    expect(server.seen).toHaveLength(1);
  });

  it('an Idempotency-Key no header can carry is refused before any request, never "no response, repeat it"', async () => {
    const server = await listen((req, res) => json(res, 201, fakeExecution('exe_1')));
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY, backoffMs: 5 });
    for (const idempotencyKey of ['order-€1', 'two words', '', 'k'.repeat(256)]) {
      const error = await dx.executions.create(SUBMISSION, { idempotencyKey }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RangeError);
      expect((error as Error).message).toContain('printable ASCII');
    }
    expect(server.seen).toHaveLength(0);
  });

  it('an apiKey or userAgent no header can carry is refused when the client is made, not sent as "no response"', async () => {
    const server = await listen((req, res) => json(res, 201, fakeExecution('exe_1')));
    // A key copied with a zero-width space, or any other value fetch cannot send, made every request throw before it
    // left: a create was retried and reported "the request may have reached the server: repeat it with the same key".
    for (const options of [
      { apiKey: `\u200b${KEY}` },
      { apiKey: `${KEY}\u0000` },
      { apiKey: `${KEY} ` },
      { apiKey: `sk-tést` },
      { apiKey: KEY, userAgent: 'agent\r\nX-Injected: 1' },
      { apiKey: KEY, userAgent: 'agent ☃' },
      { apiKey: KEY, userAgent: ' agent' },
    ]) {
      expect(() => new Verity({ baseUrl: server.url, backoffMs: 5, ...options })).toThrow(TypeError);
    }
    expect(server.seen).toHaveLength(0);
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY, userAgent: 'my-agent/1.0 (build 7)' });
    await expect(dx.executions.create(SUBMISSION)).resolves.toMatchObject({ id: 'exe_1' });
  });

  it('a refusal that proves nothing was written (400, 422) is not outcomeUnknown', async () => {
    const server = await listen((req, res) =>
      json(res, 422, { type: 'https://verity.dev/problems/idempotency-key-reused', title: 'x', status: 422 }),
    );
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY, backoffMs: 5 });
    const error = (await dx.executions.create(SUBMISSION).catch((e: unknown) => e)) as VerityServerError;
    expect(error).toMatchObject({ status: 422, outcomeUnknown: false });
  });
});

describe('requests with an effect are sent once', () => {
  it('never repeats approve, deny, resolve, retry or cancel after a dropped connection', async () => {
    const server = await listen((req) => drop(req));
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY, backoffMs: 5 });
    const calls: [string, () => Promise<unknown>][] = [
      ['/v1/operations/op_1/approval', () => dx.operations.approve('op_1', { reason: 'ok' })],
      ['/v1/operations/op_1/approval', () => dx.operations.deny('op_1')],
      ['/v1/operations/op_1/resolve', () => dx.operations.resolve('op_1', { status: 'FAILED', evidence: 'none' })],
      ['/v1/operations/op_1/retry', () => dx.operations.retry('op_1')],
      ['/v1/executions/exe_1/cancel', () => dx.executions.cancel('exe_1')],
    ];
    for (const [path, call] of calls) {
      server.seen.length = 0;
      const error = await call().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(VerityNetworkError);
      expect(error).toMatchObject({ attempts: 1, outcomeUnknown: true, path });
      expect((error as Error).message).toContain('outcome is unknown');
      expect(server.seen).toHaveLength(1);
    }
  });

  it('does not retry an idempotency conflict of a different kind', async () => {
    const server = await listen((_req, res) =>
      json(res, 409, { type: 'https://verity.dev/problems/already-decided', title: 'Conflict', status: 409 }),
    );
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY, backoffMs: 5 });
    await expect(dx.operations.approve('op_1')).rejects.toBeInstanceOf(VerityConflictError);
    expect(server.seen).toHaveLength(1);
    expect(JSON.parse(server.seen[0].body)).toEqual({ decision: 'approve' });
  });

  it('retries a GET whose connection dropped', async () => {
    const server = await listen((req, res, _body, n) => (n === 1 ? drop(req) : json(res, 200, fakeExecution('exe_1'))));
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY, backoffMs: 5 });
    await expect(dx.get('exe_1')).resolves.toMatchObject({ id: 'exe_1' });
    expect(server.seen.map((s) => s.url)).toEqual(['/v1/executions/exe_1', '/v1/executions/exe_1']);
  });
});

describe('ids in paths', () => {
  it('refuses an id that is a dot segment (or empty) before any request: it would ask another path', async () => {
    const server = await listen((_req, res) =>
      json(res, 404, { type: 'about:blank', title: 'Not Found', status: 404 }),
    );
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY, backoffMs: 5 });
    for (const id of ['..', '.', '', 'exe_\ud800', '\udc00']) {
      const calls: (() => Promise<unknown>)[] = [
        () => dx.get(id),
        () => dx.executions.cancel(id),
        () => dx.executions.events(id),
        () => dx.operations.get(id),
        () => dx.operations.retry(id),
        () => dx.operations.approve(id),
      ];
      for (const call of calls) await expect(call()).rejects.toBeInstanceOf(RangeError);
    }
    expect(server.seen).toHaveLength(0);
    // Anything else is one encoded segment, whatever it holds.
    await dx.get('../events').catch(() => undefined);
    await dx.get('%2e%2e').catch(() => undefined);
    expect(server.seen.map((s) => s.url)).toEqual(['/v1/executions/..%2Fevents', '/v1/executions/%252e%252e']);
  });
});

describe('query values', () => {
  it('refuses a lone surrogate before any request, instead of sending U+FFFD in its place', async () => {
    const server = await listen((_req, res) => json(res, 200, { data: [], next_cursor: null }));
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY, backoffMs: 5 });
    await expect(dx.executions.list({ cursor: 'exe_\ud800' })).rejects.toBeInstanceOf(RangeError);
    await expect(dx.executions.events('exe_1', { after: 'evt_\udc00' })).rejects.toBeInstanceOf(RangeError);
    expect(server.seen).toHaveLength(0);
    await dx.executions.list({ cursor: 'exe_😀' });
    expect(server.seen.map((s) => s.url)).toEqual(['/v1/executions?cursor=exe_%F0%9F%98%80']);
  });
});

describe('waitForSettled without a usable stream', () => {
  it('falls back to polling GET when the stream is refused with 429', async () => {
    let gets = 0;
    const server = await listen((req, res) => {
      if (req.url!.endsWith('/stream')) {
        json(res, 429, { type: 'https://verity.dev/problems/too-many-streams', title: 'x', status: 429 });
        return;
      }
      gets += 1;
      json(
        res,
        200,
        gets < 3 ? fakeExecution('exe_1', 'running', 'SENT') : fakeExecution('exe_1', 'completed', 'VERIFIED'),
      );
    });
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY, backoffMs: 5 });
    const settled = await dx.waitForSettled('exe_1', { timeoutMs: 10_000, pollIntervalMs: 20 });
    expect(settled.status).toBe('completed');
    expect(gets).toBe(3);
  }, 20_000);

  it('rejects with a typed timeout carrying the last state seen', async () => {
    const server = await listen((req, res) => {
      if (req.url!.endsWith('/stream')) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('retry: 1000\n\n: heartbeat\n\n');
        return; // held open, never settles
      }
      json(res, 200, fakeExecution('exe_1', 'waiting_for_approval', 'PREPARED'));
    });
    const dx = new Verity({ baseUrl: server.url, apiKey: KEY });
    // The stream never settles: only the 300 ms timeout can end the wait, and the typed rejection says it did.
    const error = (await dx.waitForSettled('exe_1', { timeoutMs: 300 }).catch((e: unknown) => e)) as VerityTimeoutError;
    expect(error).toBeInstanceOf(VerityTimeoutError);
    expect(error.timeoutMs).toBe(300);
    expect(error.lastExecution?.status).toBe('waiting_for_approval');
  });
});

/**
 * An API shaped like the real one for one execution: GET answers the current state; the stream holds its connection
 * open (as through a manual review) and pushes a status event whenever the test moves the state, or ends it.
 */
async function liveExecution(initial: Execution) {
  let state = initial;
  let seq = 0;
  const streams = new Set<ServerResponse>();
  let streamsOpened = 0;
  let gets = 0;
  const connected: (() => void)[] = [];
  const server = await listen((req, res) => {
    if (req.url!.includes('/stream')) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('retry: 10\n\n: heartbeat\n\n');
      streams.add(res);
      streamsOpened += 1;
      res.on('close', () => streams.delete(res));
      connected.splice(0).forEach((resolve) => resolve());
      return;
    }
    gets += 1;
    json(res, 200, state);
  });
  return {
    url: server.url,
    close: server.close,
    openStreams: () => streams.size,
    streamsOpened: () => streamsOpened,
    gets: () => gets,
    connected: () => new Promise<void>((resolve) => (streams.size > 0 ? resolve() : connected.push(resolve))),
    /** The state moves on, and every open stream is told with one status event. */
    move(next: Execution) {
      state = next;
      seq += 1;
      const event = { id: `evt_${seq}`, seq, type: 'operation.status_changed', to_status: next.operations[0].status };
      for (const res of streams) res.write(`id: ${event.id}\nevent: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`);
    },
    end(reason: string) {
      for (const res of streams) res.end(`event: end\ndata: ${JSON.stringify({ reason })}\n\n`);
    },
  };
}

describe("waitFor and waitForSettled on a stream that outlives the agent's part", () => {
  const verified = (e: Execution) => e.operations.every((op) => op.status === 'VERIFIED');

  it('waitForSettled resolves on a held operation while the stream stays open, and closes its connection', async () => {
    const api = await liveExecution(fakeExecution('exe_1', 'running', 'ACKNOWLEDGED'));
    const dx = new Verity({ baseUrl: api.url, apiKey: KEY });
    const waiting = dx.waitForSettled('exe_1', { timeoutMs: 10_000 });
    await api.connected();
    api.move(fakeExecution('exe_1', 'completed', 'MANUAL_REVIEW'));
    const settled = await waiting;
    expect(settled.operations[0].status).toBe('MANUAL_REVIEW');
    await waitUntil(() => api.openStreams() === 0);
  });

  it("waitFor follows the stream past the hold and resolves with the reviewer's resolution", async () => {
    const api = await liveExecution(fakeExecution('exe_1', 'running', 'ACKNOWLEDGED'));
    const dx = new Verity({ baseUrl: api.url, apiKey: KEY });
    const waiting = dx.waitFor('exe_1', verified, { timeoutMs: 10_000 });
    await api.connected();
    api.move(fakeExecution('exe_1', 'completed', 'MANUAL_REVIEW'));
    await waitUntil(() => api.gets() >= 1);
    api.move(fakeExecution('exe_1', 'completed', 'VERIFIED'));
    expect((await waiting).operations[0].status).toBe('VERIFIED');
    expect(api.streamsOpened()).toBe(1);
  });

  it('waitFor rejects with a VerityConditionError when nothing can change any more and the predicate does not hold', async () => {
    const api = await liveExecution(fakeExecution('exe_1', 'completed', 'MANUAL_REVIEW'));
    const dx = new Verity({ baseUrl: api.url, apiKey: KEY });
    const waiting = dx.waitFor('exe_1', verified, { timeoutMs: 10_000 }).catch((e: unknown) => e);
    await api.connected();
    api.move(fakeExecution('exe_1', 'completed', 'FAILED'));
    api.end('settled');
    const error = (await waiting) as VerityConditionError;
    expect(error).toBeInstanceOf(VerityConditionError);
    expect(error.execution.operations[0].status).toBe('FAILED');
  });

  it('waitFor polls once the stream ends at the deadline: a reviewer may still act', async () => {
    const api = await liveExecution(fakeExecution('exe_1', 'completed', 'MANUAL_REVIEW'));
    const dx = new Verity({ baseUrl: api.url, apiKey: KEY });
    const waiting = dx.waitFor('exe_1', verified, { timeoutMs: 10_000, pollIntervalMs: 20 });
    await api.connected();
    api.end('deadline');
    await waitUntil(() => api.gets() >= 4);
    api.move(fakeExecution('exe_1', 'completed', 'VERIFIED'));
    expect((await waiting).operations[0].status).toBe('VERIFIED');
    expect(api.streamsOpened()).toBe(1);
  });
});
