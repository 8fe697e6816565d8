import { type ChildProcess, spawn } from 'node:child_process';
import { createServer, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { UNIT_SUBMISSION } from '../support/http';
import { closedAfterEachTest, listenLocally, waitUntil } from '../support/local-server';
import { DIST } from '../support/stack';

/**
 * The `verity-mcp` stdio entry point (the compiled bin) stopped by its host while a submission is under way. The API
 * is a real HTTP server of the test's that holds the POST until the test lets it answer.
 */
const STDIO_BIN = join(DIST, 'libs', 'sdk', 'src', 'mcp', 'stdio.js');
const closeAfterTest = closedAfterEachTest();

interface Held {
  posts: number;
  answer?: (status: number, body: unknown) => void;
}

async function holdingApi() {
  const held: Held = { posts: 0 };
  const server = createServer((req, res: ServerResponse) => {
    req.resume();
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/v1/executions') {
        res.writeHead(404, { 'content-type': 'application/problem+json' }).end('{"status":404}');
        return;
      }
      held.posts += 1;
      held.answer = (status, body) =>
        res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    });
  });
  return { ...closeAfterTest(await listenLocally(server)), held };
}

function startStdio(url: string) {
  const child = spawn(process.execPath, [STDIO_BIN], {
    env: { PATH: process.env.PATH, VERITY_URL: url, VERITY_API_KEY: 'sk-test-stdio-shutdown-0001' },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const lines: Array<Record<string, unknown>> = [];
  let out = '';
  let err = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    out += chunk.toString();
    for (let i = out.indexOf('\n'); i >= 0; i = out.indexOf('\n')) {
      lines.push(JSON.parse(out.slice(0, i)) as Record<string, unknown>);
      out = out.slice(i + 1);
    }
  });
  child.stderr!.on('data', (chunk: Buffer) => (err += chunk.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const send = (message: Record<string, unknown>) =>
    child.stdin!.write(`${JSON.stringify({ jsonrpc: '2.0', ...message })}\n`);
  return { child, lines, stderr: () => err, exited, send };
}

async function initialized(stdio: ReturnType<typeof startStdio>): Promise<void> {
  stdio.send({
    id: 1,
    method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'shutdown-e2e', version: '1' } },
  });
  await waitUntil(() => stdio.lines.some((l) => l.id === 1));
  stdio.send({ method: 'notifications/initialized' });
}

const execution = {
  id: 'exe_stdio_shutdown',
  agent_id: 'unit',
  intent: 'charge',
  status: 'created',
  effects: { summary: 'unknown', counts: {} },
  operations: [{ id: 'op_1', key: 'charge', status: 'PREPARED', verification_method: 'read_after_write' }],
};

describe('verity-mcp (stdio) on SIGTERM', () => {
  let child: ChildProcess | undefined;
  afterEach(() => {
    if (child?.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });

  /** The stdio server with a submit_execution in flight: the API holds its POST until the test answers it. */
  async function submissionInFlight() {
    const api = await holdingApi();
    const stdio = startStdio(api.url);
    child = stdio.child;
    await initialized(stdio);
    stdio.send({ id: 2, method: 'tools/call', params: { name: 'submit_execution', arguments: UNIT_SUBMISSION } });
    await waitUntil(() => api.held.answer !== undefined);
    return { api, stdio };
  }

  it('answers the submission in flight, then exits 0', async () => {
    const { api, stdio } = await submissionInFlight();

    stdio.child.kill('SIGTERM');
    // It says it is finishing the request first (without the fix it was killed by the signal there and then).
    const gone = stdio.exited.then(() => true);
    let exitedAtOnce = false;
    void gone.then(() => (exitedAtOnce = true));
    await waitUntil(() => exitedAtOnce || stdio.stderr().includes('answering 1 request(s) in flight first'));
    api.held.answer!(201, execution);

    expect(await stdio.exited).toEqual({ code: 0, signal: null });
    const answer = stdio.lines.find((l) => l.id === 2) as {
      result?: { isError?: boolean; structuredContent?: { execution: { id: string }; idempotency_key: unknown } };
    };
    expect(answer?.result?.isError).toBeFalsy();
    expect(answer.result?.structuredContent?.execution.id).toBe('exe_stdio_shutdown');
    expect(answer.result?.structuredContent?.idempotency_key).toEqual(expect.any(String));
    expect(api.held.posts).toBe(1);
  });

  // A submission the API never answers outlasts the grace (SHUTDOWN_GRACE_MS, 10 s): the exit is forced. It was exit
  // 0, as if every request had been answered, where every other Verity process's forced exit is 1.
  it('exits 1 when the grace runs out with a request unanswered, saying what went unanswered', async () => {
    const { api, stdio } = await submissionInFlight();

    stdio.child.kill('SIGTERM');

    expect(await stdio.exited).toEqual({ code: 1, signal: null });
    expect(stdio.stderr()).toContain('answering 1 request(s) in flight first');
    expect(stdio.stderr()).toContain(
      'SIGTERM: the grace (10 s) ran out; 1 request(s) in flight went unanswered (a submission among them may have ' +
        'been made: read the executions before submitting again)',
    );
    expect(stdio.lines.some((l) => l.id === 2)).toBe(false);
    expect(api.held.posts).toBe(1);
  });

  /**
   * The stdio server with a wait_for_execution in flight (up to 50 s) for an execution that does not settle — the API's
   * stream of it opens and nothing ever happens on it — stopped by `stop`: how it exited.
   */
  async function stoppedWithWaitInFlight(stop: (child: ChildProcess) => void) {
    const streams: ServerResponse[] = [];
    const server = createServer((req, res) => {
      req.resume();
      const path = new URL(req.url ?? '/', 'http://x').pathname;
      if (path === '/v1/executions/exe_waiting/stream') {
        // Open, and nothing ever happens on it: the execution does not settle.
        res.writeHead(200, { 'content-type': 'text/event-stream' }).write(': open\n\n');
        streams.push(res);
        return;
      }
      const body =
        path === '/v1/executions/exe_waiting'
          ? { ...execution, id: 'exe_waiting' }
          : path === '/v1/executions/exe_waiting/events'
            ? { data: [], next_cursor: null }
            : undefined;
      res.writeHead(body ? 200 : 404, { 'content-type': 'application/json' }).end(JSON.stringify(body ?? {}));
    });
    const api = closeAfterTest(await listenLocally(server));
    const stdio = startStdio(api.url);
    child = stdio.child;
    await initialized(stdio);
    stdio.send({
      id: 2,
      method: 'tools/call',
      params: { name: 'wait_for_execution', arguments: { execution_id: 'exe_waiting', timeout_seconds: 50 } },
    });
    await waitUntil(() => streams.length > 0);

    stop(stdio.child);
    const exited = await stdio.exited;
    for (const stream of streams) stream.destroy();
    return { stdio, exited };
  }

  // A wait runs for up to 50 s and changes nothing: held for the grace (10 s), it was never answered — the process
  // exited under it, and the host's client learnt nothing of the execution it was following.
  it('ends a wait in flight at once with the current state (not settled), then exits 0 without the grace', async () => {
    const { stdio, exited } = await stoppedWithWaitInFlight((child) => child.kill('SIGTERM'));
    // 0, not the forced exit 1 at the grace (SHUTDOWN_GRACE_MS, 10 s): nothing waited it out, and the wait answered
    // because the stop ended it (stopped: true below), not because its 50 s ran out (timed_out: false).
    expect(exited).toEqual({ code: 0, signal: null });
    expect(stdio.stderr()).not.toContain('ran out');
    const answer = stdio.lines.find((l) => l.id === 2) as {
      result?: { isError?: boolean; content: { text: string }[]; structuredContent?: Record<string, unknown> };
    };
    expect(answer?.result?.isError).toBeFalsy();
    expect(answer.result?.content[0].text).toMatch(/^The MCP server is stopping/);
    expect(answer.result?.content[0].text).toContain('call wait_for_execution again');
    expect(answer.result?.content[0].text).toContain('never submit the execution again');
    expect(answer.result?.structuredContent).toMatchObject({
      stopped: true,
      timed_out: false,
      report: { execution_id: 'exe_waiting', settled: false },
    });
  });

  // A host that quits closes both pipes. The wait then answered at once (above), into an output nobody reads: the write
  // failed with EPIPE, nothing listened for the error on stdout, and the process crashed with exit 1 and a stack trace.
  it('exits 0 when the host closes its output and input with a wait in flight (no crash on EPIPE)', async () => {
    const { stdio, exited } = await stoppedWithWaitInFlight((child) => {
      child.stdout!.destroy();
      child.stdin!.end();
    });
    // 0, not the forced exit 1 at the grace (10 s): the answer nobody can read is not waited for.
    expect([exited, stdio.stderr()]).toEqual([{ code: 0, signal: null }, expect.not.stringContaining('EPIPE')]);
    expect(stdio.stderr()).not.toContain('ran out');
  });

  // The host asked again: it will not wait for the grace. As the API's CLIs do, a second signal stops it at once, exit
  // 1, saying that the requests in flight went unanswered (ignored, the process ran on for the grace, 10 s).
  it('a second signal stops it at once: exit 1, saying the requests in flight went unanswered', async () => {
    const { stdio } = await submissionInFlight();
    stdio.child.kill('SIGTERM');
    await waitUntil(() => stdio.stderr().includes('answering 1 request(s) in flight first'));
    stdio.child.kill('SIGINT');
    expect(await stdio.exited).toEqual({ code: 1, signal: null });
    // The 1 is the second signal's, not the forced exit at the grace (which says the grace ran out).
    expect(stdio.stderr()).toContain('SIGINT: stopped at once; 1 request(s) in flight went unanswered');
    expect(stdio.stderr()).not.toContain('ran out');
    expect(stdio.lines.some((l) => l.id === 2)).toBe(false);
  });

  // An MCP host ends a stdio server by closing its input, then, if it has not exited, SIGTERM: the signal after the end
  // of input is the host asking again (ignored, the process ran on for the grace, 10 s, whatever the host asked).
  it('a signal after the end of input stops it at once: exit 1, saying the requests in flight went unanswered', async () => {
    const { stdio } = await submissionInFlight();
    stdio.child.stdin!.end();
    await waitUntil(() => stdio.stderr().includes('end of input: answering 1 request(s) in flight first'));
    stdio.child.kill('SIGTERM');
    expect(await stdio.exited).toEqual({ code: 1, signal: null });
    expect(stdio.stderr()).toContain('SIGTERM: stopped at once; 1 request(s) in flight went unanswered');
    expect(stdio.stderr()).not.toContain('ran out');
  });

  it('with nothing in flight, exits 0 at once', async () => {
    const api = await holdingApi();
    const stdio = startStdio(api.url);
    child = stdio.child;
    await initialized(stdio);
    stdio.child.kill('SIGTERM');
    expect(await stdio.exited).toEqual({ code: 0, signal: null });
  });
});
