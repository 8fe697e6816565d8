import { connect, type Socket } from 'node:net';
import { DEMO, METRICS_TOKEN, Stack, waitFor } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { getExecution, submit } from './dispatcher-helpers';

/** The answer budget of each API process in this file: far below one answer of the execution built here. */
const BUDGET = 1024 * 1024;
const OPS = 40;

/**
 * One execution's GET /v1/executions/{id} can be ~20 MB of JSON, and a page of executions (or of the review queue)
 * always keeps one item however large. Built in an API heap of 128 MB, a dozen such answers at once ran it out of
 * memory (SIGABRT) for every tenant, though a key may have 64 requests in flight. The stored text the answers under way
 * hold is now bounded in each API process (ANSWER_BYTES_IN_FLIGHT): an answer takes its bytes before its operations are
 * read and gives them back once written out or when its client leaves; past the budget it waits its turn
 * (ANSWER_BYTES_IN_FLIGHT_WAIT_MS), then 503 answers-busy with Retry-After.
 *
 * An answer is held under way by a client that sends its GET and never reads: the answer (~16 MB) is more than the
 * sockets' buffers take, so it is never written out until the client leaves.
 */
describe('the stored text of the answers under way is bounded in each API process', () => {
  let stack: Stack;
  let executionId: string;
  let executionBytes: number;
  beforeAll(async () => {
    stack = await Stack.start({
      label: 'red28c-answer-bytes',
      env: { ANSWER_BYTES_IN_FLIGHT: String(BUDGET), ANSWER_BYTES_IN_FLIGHT_WAIT_MS: '60000' },
    });
    const created = await submit(
      stack,
      Array.from({ length: OPS }, (_, i) => ({
        ...charge(unique(`red28c-${i}`), { expected_state: { charged: true } }),
        key: `charge-${i}`,
      })),
    );
    executionId = created.id;
    const held = await waitFor(
      () => getExecution(stack, executionId),
      (e) => e.operations.every((o) => o.status === 'MANUAL_REVIEW'),
      60_000,
      200,
    );
    // One "still unknown" through the API, then copied 100 times onto every hold (written directly: far past what a
    // hold keeps, to build a large answer fast).
    const first = held.operations[0].id;
    const noted = await http(stack.apiUrl, 'POST', `/v1/operations/${first}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'MANUAL_REVIEW', evidence: '"'.repeat(2_000) },
    });
    expect(noted.status).toBe(200);
    await stack.db.dataSource.query(
      `UPDATE operations o SET obligation = jsonb_set(o.obligation, '{investigations}',
         (SELECT jsonb_agg(src.obligation->'investigations'->0) FROM generate_series(1, 100), operations src
           WHERE src.id = $1))
       WHERE execution_id = $2`,
      [first, executionId],
    );
    const [row] = (await stack.db.dataSource.query(
      `SELECT (octet_length(e::text) + (SELECT sum(octet_length(o::text)) FROM operations o
                                         WHERE o.execution_id = e.id))::float8 AS bytes
       FROM executions e WHERE e.id = $1`,
      [executionId],
    )) as { bytes: number }[];
    executionBytes = Number(row.bytes);
    expect(executionBytes).toBeGreaterThan(12 * BUDGET);
  }, 180_000);
  afterAll(async () => stack?.stop());

  /** The API's gauges of the budget: bytes held by answers under way, and answers waiting for theirs. */
  async function budget(apiUrl: string): Promise<{ inFlight: number; waiting: number }> {
    const res = await http(apiUrl, 'GET', '/metrics', { key: METRICS_TOKEN });
    const value = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(res.text)?.[1] ?? NaN);
    return {
      inFlight: value('verity_api_answer_bytes_in_flight'),
      waiting: value('verity_api_answers_waiting_for_bytes'),
    };
  }

  /** A GET whose client never reads its answer (until `destroy`): the answer stays under way. */
  function unreadGet(apiUrl: string, path: string, key: string): Socket {
    const url = new URL(apiUrl);
    const socket = connect(Number(url.port), url.hostname);
    socket.pause();
    socket.write(`GET ${path} HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${key}\r\n\r\n`);
    return socket;
  }

  it('a second large answer waits until the first has been given back (its client left), then is served whole', async () => {
    const path = `/v1/executions/${executionId}`;
    const holder = unreadGet(stack.apiUrl, path, DEMO.agent);
    try {
      // Larger than the whole budget: served while no other answer holds any of it.
      await waitFor(
        () => budget(stack.apiUrl),
        (b) => b.inFlight === executionBytes,
      );

      const second = http<{ id: string; operations: unknown[] }>(stack.apiUrl, 'GET', path, { key: DEMO.reviewer });
      const waiting = await waitFor(
        () => budget(stack.apiUrl),
        (b) => b.waiting === 1,
      );
      // Never both at once: the first's bytes alone are held.
      expect(waiting.inFlight).toBe(executionBytes);

      holder.destroy();
      const answer = await second;
      expect(answer.status).toBe(200);
      expect(answer.body.operations).toHaveLength(OPS);
    } finally {
      holder.destroy();
    }
    // Each answer gave its bytes back: the one whose client left, and the one written out.
    await waitFor(
      () => budget(stack.apiUrl),
      (b) => b.inFlight === 0 && b.waiting === 0,
    );
  });

  it('with no wait, an answer past the budget is 503 answers-busy with Retry-After — the execution, a page of executions, a page of the review queue — and served once the budget is free', async () => {
    const apiUrl = await stack.startApi({ ANSWER_BYTES_IN_FLIGHT_WAIT_MS: '0' });
    const path = `/v1/executions/${executionId}`;
    const holder = unreadGet(apiUrl, path, DEMO.agent);
    try {
      await waitFor(
        () => budget(apiUrl),
        (b) => b.inFlight === executionBytes,
      );
      for (const [target, key] of [
        [path, DEMO.agent],
        ['/v1/executions?limit=1', DEMO.agent],
        ['/v1/review/manual-reviews', DEMO.reviewer],
      ]) {
        const refused = await http<{ type: string; detail: string }>(apiUrl, 'GET', target, { key });
        expect({ target, status: refused.status, retryAfter: refused.headers.get('retry-after') }).toEqual({
          target,
          status: 503,
          retryAfter: '1',
        });
        expect(refused.body.type).toBe('https://verity.dev/problems/answers-busy');
        expect(refused.body.detail).toContain('ANSWER_BYTES_IN_FLIGHT');
      }
      expect(await budget(apiUrl)).toEqual({ inFlight: executionBytes, waiting: 0 });
    } finally {
      holder.destroy();
    }
    await waitFor(
      () => budget(apiUrl),
      (b) => b.inFlight === 0,
    );
    const served = await http<{ data: unknown[] }>(apiUrl, 'GET', '/v1/review/manual-reviews', { key: DEMO.reviewer });
    expect(served.status).toBe(200);
    expect(served.body.data.length).toBeGreaterThan(0);
    const page = await http<{ data: unknown[] }>(apiUrl, 'GET', '/v1/executions?limit=1', { key: DEMO.agent });
    expect(page.status).toBe(200);
  });
});
