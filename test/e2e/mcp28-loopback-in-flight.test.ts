import { lockExecutionRow, lockWaiters, unlockRow } from '../support/lock-waits';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http, sms, submission, unique } from '../support/http';

/**
 * The calls the MCP endpoint makes to this process's /v1 for a client. The client's MCP request is counted
 * (MAX_MCP_REQUESTS_PER_KEY), and its place is given back when the client leaves; the loopback calls its tools made
 * were then aborted, but the /v1 handlers they started went on, counted nowhere. A client could send a batch, leave,
 * and send it again without end, each round's calls still holding a Postgres session. Those calls are now counted
 * against the MCP bounds until their work ends, as any /v1 request is; past the bound the call is refused 429 and the
 * tool answers so.
 *
 * A call is held by a row lock: a cancel of an execution waits (in Postgres, for as long as the test holds the lock)
 * on the execution's row, and the test sees it waiting there (pg_stat_activity).
 */
const PER_KEY = 3;
/** A tenant's share, half the process's bound, as many as a key's. */
const PER_PROCESS = 6;
const HEADERS = {
  accept: 'application/json, text/event-stream',
  'content-type': 'application/json',
  'mcp-protocol-version': '2025-03-26',
};

let stack: Stack;

beforeAll(async () => {
  stack = await Stack.start({
    label: 'mcp28-loopback-in-flight',
    dispatchers: 0,
    reconcilers: 0,
    // A held call waits on the lock for as long as the test holds it, not for the default 10 s.
    env: {
      MAX_MCP_REQUESTS_PER_KEY: String(PER_KEY),
      MAX_MCP_REQUESTS_PER_PROCESS: String(PER_PROCESS),
      DATABASE_QUERY_TIMEOUT_MS: '60000',
      SHUTDOWN_GRACE_MS: '65000',
    },
  });
}, 120_000);

afterAll(async () => {
  await stack?.stop();
});

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

interface ToolResult {
  isError: boolean;
  text: string;
}

/** A POST to /mcp; `abort` makes its client go away. Its answer: the HTTP status and each tool result. */
function mcpPost(calls: { name: string; args: Record<string, unknown> }[], key: string = DEMO.agent) {
  const client = new AbortController();
  const body = calls.map(({ name, args }, i) => ({
    jsonrpc: '2.0',
    id: i + 1,
    method: 'tools/call',
    params: { name, arguments: args },
  }));
  const answer = fetch(`${stack.apiUrl}/mcp`, {
    method: 'POST',
    headers: { ...HEADERS, authorization: `Bearer ${key}` },
    body: JSON.stringify(body),
    signal: client.signal,
  })
    .then(async (res) => {
      const text = await res.text();
      const results = [...text.matchAll(/^data: (.*)$/gm)]
        .map((m) => JSON.parse(m[1]) as { result?: { isError?: boolean; content: { text: string }[] } })
        .filter((message) => message.result !== undefined)
        .map((message): ToolResult => ({
          isError: message.result?.isError === true,
          text: message.result?.content.map((c) => c.text).join('\n') ?? '',
        }));
      return { status: res.status, text, results };
    })
    // The client left (before the answer's headers or during its body).
    .catch((error: unknown) => ({ status: 0, text: String(error), results: [] as ToolResult[] }));
  return { answer, abort: () => client.abort() };
}

const cancels = (executionId: string, count = PER_KEY) =>
  Array.from({ length: count }, () => ({ name: 'cancel_execution', args: { execution_id: executionId } }));

describe('MCP: the API calls of a client that left', () => {
  it('keeps them counted until their work ends: a client that leaves and sends again gets no more of them at once than the bound, and the key is served again once they end', async () => {
    const executionId = await pendingExecution();
    let holder = await lockRow(executionId);
    const posts: ReturnType<typeof mcpPost>[] = [];
    try {
      // A batch of cancels, each waiting on the row; its client leaves.
      const first = mcpPost(cancels(executionId));
      posts.push(first);
      await waitFor(waitingOnLocks, (n) => n >= PER_KEY);
      first.abort();
      expect((await first.answer).status).toBe(0);
      // Their work goes on: each cancel still waits on the row, holding a session of the pool.
      expect(await waitingOnLocks()).toBeGreaterThanOrEqual(PER_KEY);

      // The client sends the batch again (as soon as the MCP endpoint takes it: its places come back once the first
      // POST's close has been heard). Fails at once, rather than at the test's timeout, when a call reaches the row.
      let answered = false;
      const again = waitFor(
        async () => {
          const post = mcpPost(cancels(executionId));
          posts.push(post);
          return post.answer;
        },
        (seen) => seen.status !== 429,
      ).finally(() => (answered = true));
      const reached = waitFor(async () => answered || (await waitingOnLocks()) > PER_KEY, Boolean).then(() =>
        answered ? 'answered' : 'an API call past the bound reached the row',
      );
      expect(await Promise.race([again.then(() => 'answered'), reached])).toBe('answered');
      const refused = await again;
      // Each of its calls was refused before it did anything, and its tool said so.
      expect(refused.status).toBe(200);
      expect(refused.results).toHaveLength(PER_KEY);
      for (const result of refused.results) {
        expect(result.isError).toBe(true);
        expect(result.text).toContain('429 rate-limited');
        expect(result.text).toContain(`at most ${PER_KEY} API calls of one key's MCP tools in flight`);
      }
      expect(await waitingOnLocks()).toBe(PER_KEY);

      // Once the row is free the held calls end, and their places come back: the key is served again.
      await unlock(holder);
      await waitFor(waitingOnLocks, (n) => n === 0);
      const served = await waitFor(
        () => mcpPost([{ name: 'get_execution', args: { execution_id: executionId } }]).answer,
        (seen) => seen.status === 200 && seen.results.length === 1 && !seen.results[0].isError,
      );
      expect(served.results[0].text).toContain(executionId);

      // Nothing was kept: the key's calls reach the row again, its whole bound of them.
      holder = await lockRow(executionId);
      const whole = mcpPost(cancels(executionId));
      posts.push(whole);
      await waitFor(waitingOnLocks, (n) => n >= PER_KEY);
      await unlock(holder);
      const ended = await whole.answer;
      expect(ended.status).toBe(200);
      expect(ended.results).toHaveLength(PER_KEY);
      for (const result of ended.results) expect(result.text).not.toContain('429');
    } finally {
      for (const post of posts) post.abort();
      if (holder.isTransactionActive) await unlock(holder);
    }
  }, 60_000);

  it("counts a tenant's keys together, against half the process's MCP bound, and another tenant is still served", async () => {
    const executionId = await pendingExecution();
    const holder = await lockRow(executionId);
    const posts: ReturnType<typeof mcpPost>[] = [];
    try {
      // Two of the agent's calls held on the row, their client gone.
      const first = mcpPost(cancels(executionId, 2));
      posts.push(first);
      await waitFor(waitingOnLocks, (n) => n >= 2);
      first.abort();
      expect((await first.answer).status).toBe(0);
      // Two single calls of another key of the same tenant: one takes the tenant's last place, the other is refused.
      const admin = [0, 1].map(() => mcpPost(cancels(executionId, 1), DEMO.admin));
      posts.push(...admin);
      let answered = false;
      const refused = Promise.race(admin.map((post) => post.answer)).finally(() => (answered = true));
      const reached = waitFor(async () => answered || (await waitingOnLocks()) > PER_PROCESS / 2, Boolean).then(() =>
        answered ? 'answered' : 'an API call past the tenant bound reached the row',
      );
      expect(await Promise.race([refused.then(() => 'answered'), reached])).toBe('answered');
      const { status, results } = await refused;
      expect({ status, results }).toEqual({
        status: 200,
        results: [{ isError: true, text: expect.stringContaining('429 rate-limited') as unknown }],
      });
      expect(results[0].text).toContain(`at most ${PER_PROCESS / 2} API calls of one tenant's MCP tools`);
      // Another tenant's calls are its own.
      const other = await mcpPost([{ name: 'list_connectors', args: {} }], DEMO.otherAgent).answer;
      expect(other.results).toEqual([{ isError: false, text: expect.stringContaining('sandbox') as unknown }]);
      await unlock(holder);
      await waitFor(waitingOnLocks, (n) => n === 0);
    } finally {
      for (const post of posts) post.abort();
      if (holder.isTransactionActive) await unlock(holder);
    }
  }, 60_000);
});
