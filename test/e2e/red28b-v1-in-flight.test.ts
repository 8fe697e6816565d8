import { lockExecutionRow, lockWaiters, unlockRow } from '../support/lock-waits';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http, rawExchange, sms, submission, unique } from '../support/http';

/**
 * The /v1 requests one key may have in flight at once in one API process. The rate limit (a token bucket) lets a key
 * send hundreds at once: 400 concurrent reads of large executions from one agent key took every session of the
 * Postgres pool, and 65–248 of them — and every other tenant's requests meanwhile — were answered 503. Past the bound
 * a request is refused 429 rate-limited (Retry-After: 1) before anything in it runs; its place is given back when its
 * answer ends or its client goes away.
 *
 * A request is held in flight by a row lock: a cancel of an execution waits (in Postgres, for as long as the test
 * holds the lock) on the execution's row, and the test sees it waiting there (pg_stat_activity).
 */
const PER_KEY = 3;
/** A tenant's share: half the process's bound, as many as a key's. */
const PER_PROCESS = 6;
const PER_TENANT = PER_PROCESS / 2;
/** The streams a key may hold: a stream's request is bounded by them, not by the requests in flight. */
const STREAMS_PER_KEY = 2;

let stack: Stack;

beforeAll(async () => {
  stack = await Stack.start({
    label: 'red28b-v1-in-flight',
    dispatchers: 0,
    reconcilers: 0,
    // A held request waits on the lock for as long as the test holds it, not for the default 10 s (the test takes a few).
    env: {
      MAX_V1_REQUESTS_PER_KEY: String(PER_KEY),
      MAX_V1_REQUESTS_PER_PROCESS: String(PER_PROCESS),
      MAX_STREAMS_PER_KEY: String(STREAMS_PER_KEY),
      DATABASE_QUERY_TIMEOUT_MS: '60000',
      SHUTDOWN_GRACE_MS: '65000',
    },
  });
}, 120_000);

afterAll(async () => {
  await stack?.stop();
});

async function executionCount(): Promise<number> {
  const [row] = (await stack.db.dataSource.query(`SELECT count(*)::int AS n FROM executions`)) as { n: number }[];
  return row.n;
}

/** Sessions of the stack's database waiting for a lock: the cancels held on the execution's row. */
const waitingOnLocks = () => lockWaiters(stack.db.dataSource);

async function pendingExecution(): Promise<string> {
  const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
    key: DEMO.agent,
    body: submission([sms(unique('held'))]),
  });
  expect(created.status).toBe(201);
  return created.body.id;
}

const lockRow = (executionId: string) => lockExecutionRow(stack.db.dataSource, executionId);
const unlock = unlockRow;

/** A cancel of the execution, which waits on the locked row; `abort` makes its client go away. */
function heldCancel(executionId: string, key: string = DEMO.agent) {
  const client = new AbortController();
  const answer = fetch(`${stack.apiUrl}/v1/executions/${executionId}/cancel`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}` },
    signal: client.signal,
  }).then(
    async (res) => ({ status: res.status, body: await res.text() }),
    (error: unknown) => ({ status: 0, body: String(error) }),
  );
  return { answer, abort: () => client.abort() };
}

describe('/v1: requests in flight per key', () => {
  it('refuses the key past its bound (429, Retry-After: 1, nothing written), serves another tenant, and gives each place back when its answer ends, or when its client left and its work ends', async () => {
    const executionId = await pendingExecution();
    let holder = await lockRow(executionId);
    const held = Array.from({ length: PER_KEY }, () => heldCancel(executionId));
    try {
      await waitFor(waitingOnLocks, (n) => n >= PER_KEY);

      // The key's next request, a read or a write, is refused before anything in it runs.
      const before = await executionCount();
      const refusedWrite = await http<{ type: string; detail: string }>(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: submission([sms(unique('refused'))]),
      });
      expect({ status: refusedWrite.status, retryAfter: refusedWrite.headers.get('retry-after') }).toEqual({
        status: 429,
        retryAfter: '1',
      });
      expect(refusedWrite.body).toMatchObject({
        type: 'https://verity.dev/problems/rate-limited',
        detail: expect.stringContaining(`at most ${PER_KEY} requests of one key in flight`),
      });
      expect(await executionCount()).toBe(before);
      const refusedRead = await http(stack.apiUrl, 'GET', `/v1/executions/${executionId}`, { key: DEMO.agent });
      expect(refusedRead.status).toBe(429);
      // The same read with an absolute-form target (`GET http://host/v1/…`, the host Host names), which the router
      // serves as /v1/…, is counted as well.
      const host = new URL(stack.apiUrl).host;
      const absolute = await rawExchange(
        stack.apiUrl,
        `GET http://${host}/v1/executions/${executionId} HTTP/1.1\r\nHost: ${host}\r\n` +
          `Authorization: Bearer ${DEMO.agent}\r\nConnection: close\r\n\r\n`,
        { halfClose: false },
      );
      expect(absolute.status).toBe(429);

      // Another tenant's key is served meanwhile.
      const other = await http(stack.apiUrl, 'GET', '/v1/executions', { key: DEMO.otherAgent });
      expect(other.status).toBe(200);

      // A stream is not counted (it is bounded as a stream): the key opens one while its requests hold every place.
      const streamClient = new AbortController();
      const stream = await fetch(`${stack.apiUrl}/v1/executions/${executionId}/stream`, {
        headers: { authorization: `Bearer ${DEMO.agent}` },
        signal: streamClient.signal,
      });
      expect({ status: stream.status, type: stream.headers.get('content-type') }).toEqual({
        status: 200,
        type: expect.stringContaining('text/event-stream'),
      });
      streamClient.abort();

      // A client that goes away keeps its place while its cancel still waits on the row (its work goes on): the
      // key's next request is refused still.
      held[0].abort();
      expect((await held[0].answer).status).toBe(0);
      expect((await http(stack.apiUrl, 'GET', `/v1/executions/${executionId}`, { key: DEMO.agent })).status).toBe(429);

      // Answers that end give theirs back: once the row is free, every held cancel is answered.
      await unlock(holder);
      // One of the cancels (the one whose client left among them) is written, the others learn it was made.
      for (const { status } of await Promise.all(held.slice(1).map((h) => h.answer)))
        expect([200, 409]).toContain(status);
      await waitFor(waitingOnLocks, (n) => n === 0);
      // The cancel whose client left gives its place back once its work has ended.
      const served = await waitFor(
        async () => (await http(stack.apiUrl, 'GET', `/v1/executions/${executionId}`, { key: DEMO.agent })).status,
        (status) => status !== 429,
      );
      expect(served).toBe(200);

      // Nothing was kept: the key holds its whole bound again (each of PER_KEY requests reaches the row).
      holder = await lockRow(executionId);
      const again = Array.from({ length: PER_KEY }, () => heldCancel(executionId));
      held.push(...again);
      await waitFor(waitingOnLocks, (n) => n >= PER_KEY);
      expect((await http(stack.apiUrl, 'GET', '/v1/executions', { key: DEMO.agent })).status).toBe(429);
      await unlock(holder);
      for (const { status } of await Promise.all(again.map((h) => h.answer))) expect(status).toBe(409);
      expect((await http(stack.apiUrl, 'GET', '/v1/executions', { key: DEMO.agent })).status).toBe(200);
    } finally {
      for (const h of held) h.abort();
      if (holder.isTransactionActive) await unlock(holder);
    }
  }, 60_000);

  it("refuses a tenant's keys together past half the process's bound, and another tenant is still served", async () => {
    const executionId = await pendingExecution();
    const holder = await lockRow(executionId);
    // Two of the agent's and one of the admin's (the same tenant): each key under its own bound, the tenant at its share.
    const held = [heldCancel(executionId), heldCancel(executionId), heldCancel(executionId, DEMO.admin)];
    try {
      await waitFor(waitingOnLocks, (n) => n >= PER_TENANT);
      const refused = await http<{ type: string; detail: string }>(stack.apiUrl, 'GET', '/v1/review/summary', {
        key: DEMO.reviewer,
      });
      expect({ status: refused.status, retryAfter: refused.headers.get('retry-after') }).toEqual({
        status: 429,
        retryAfter: '1',
      });
      expect(refused.body).toMatchObject({
        type: 'https://verity.dev/problems/rate-limited',
        detail: expect.stringContaining(`at most ${PER_TENANT} requests of one tenant (all its keys) in flight`),
      });
      expect((await http(stack.apiUrl, 'GET', '/v1/executions', { key: DEMO.otherAgent })).status).toBe(200);
      await unlock(holder);
      for (const { status } of await Promise.all(held.map((h) => h.answer))) expect([200, 409]).toContain(status);
      expect((await http(stack.apiUrl, 'GET', '/v1/review/summary', { key: DEMO.reviewer })).status).toBe(200);
    } finally {
      for (const h of held) h.abort();
      if (holder.isTransactionActive) await unlock(holder);
    }
  }, 60_000);

  it("bounds a stream's requests by the key's streams from their first read: a HEAD, or one past the bound, reads nothing", async () => {
    const executionId = await pendingExecution();
    // Every read of an execution waits while the test holds the table.
    const holder = stack.db.dataSource.createQueryRunner();
    await holder.connect();
    await holder.startTransaction();
    await holder.query(`LOCK TABLE executions IN ACCESS EXCLUSIVE MODE`);
    const clients = Array.from({ length: STREAMS_PER_KEY + 3 }, () => new AbortController());
    const answers = clients.map((client) =>
      fetch(`${stack.apiUrl}/v1/executions/${executionId}/stream`, {
        method: 'HEAD',
        headers: { authorization: `Bearer ${DEMO.agent}` },
        signal: client.signal,
      }).then(
        (res) => res.status,
        () => 0,
      ),
    );
    try {
      // Those past the key's streams are refused before they read anything; the others wait on the table.
      const settled: number[] = [];
      for (const answer of answers) void answer.then((status) => settled.push(status));
      await waitFor(
        async () => settled.filter((status) => status === 429).length,
        (n) => n >= 3,
      );
      await waitFor(waitingOnLocks, (n) => n >= 1);
      expect(await waitingOnLocks()).toBeLessThanOrEqual(STREAMS_PER_KEY);
      await holder.rollbackTransaction();
      for (const status of await Promise.all(answers)) expect([200, 429]).toContain(status);
    } finally {
      for (const client of clients) client.abort();
      if (holder.isTransactionActive) await holder.rollbackTransaction();
      await holder.release();
    }
  }, 60_000);

  it('keeps the place of a request whose client left until its work ends: leaving is no way past the bound', async () => {
    const executionId = await pendingExecution();
    const holder = await lockRow(executionId);
    const held = Array.from({ length: PER_KEY }, () => heldCancel(executionId));
    const again: ReturnType<typeof heldCancel>[] = [];
    try {
      await waitFor(waitingOnLocks, (n) => n >= PER_KEY);
      // Every client leaves; their cancels still wait on the row, each still using a session of the pool.
      for (const h of held) h.abort();
      for (const { status } of await Promise.all(held.map((h) => h.answer))) expect(status).toBe(0);
      expect(await waitingOnLocks()).toBeGreaterThanOrEqual(PER_KEY);
      // The key sends as many again: each is refused, none reaches the row.
      again.push(...Array.from({ length: PER_KEY }, () => heldCancel(executionId)));
      let answered = false;
      const answers = Promise.all(again.map((h) => h.answer)).finally(() => (answered = true));
      // Fails at once, rather than at the test's timeout, when one of them reaches the row.
      const reached = waitFor(async () => answered || (await waitingOnLocks()) > PER_KEY, Boolean).then(() =>
        answered ? 'answered' : 'a request past the bound reached the row',
      );
      expect(await Promise.race([answers.then(() => 'answered'), reached])).toBe('answered');
      for (const { status } of await answers) expect(status).toBe(429);
      await unlock(holder);
      await waitFor(waitingOnLocks, (n) => n === 0);
      // Once their work has ended the places are given back.
      const served = await waitFor(
        async () => (await http(stack.apiUrl, 'GET', `/v1/executions/${executionId}`, { key: DEMO.agent })).status,
        (status) => status !== 429,
      );
      expect(served).toBe(200);
    } finally {
      for (const h of [...held, ...again]) h.abort();
      if (holder.isTransactionActive) await unlock(holder);
    }
  }, 60_000);
});
