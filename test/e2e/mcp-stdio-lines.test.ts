import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { DIST } from '../support/stack';

/**
 * The `verity-mcp` stdio entry point (the compiled bin) read line by line as a careless or hostile client writes them:
 * every line that is not a JSON-RPC message is answered with a JSON-RPC error, as /mcp answers such a body. None of
 * these lines reaches the API, so no stack runs: the URL names a port nothing listens on.
 */
const STDIO_BIN = join(DIST, 'libs', 'sdk', 'src', 'mcp', 'stdio.js');

interface Answer {
  id?: unknown;
  result?: unknown;
  error?: { code: number; message: string };
}

let child: ChildProcessWithoutNullStreams | undefined;

afterEach(async () => {
  if (child && child.exitCode === null && child.signalCode === null) {
    child.kill('SIGKILL');
    await once(child, 'exit');
  }
  child = undefined;
});

/** Starts the bin; `next()` is its next line on stdout, parsed. */
function start() {
  const proc = spawn(process.execPath, [STDIO_BIN, '--url', 'http://127.0.0.1:9'], {
    env: { ...process.env, VERITY_API_KEY: 'not-used-here' },
  });
  child = proc;
  // Without the fix the process exits under the test's writes: the assertions say so, not an EPIPE.
  proc.stdin.on('error', () => undefined);
  const lines = createInterface({ input: proc.stdout })[Symbol.asyncIterator]();
  return {
    send: (...raw: string[]) => proc.stdin.write(raw.map((line) => `${line}\n`).join('')),
    next: async (): Promise<Answer> => {
      const { value, done } = await lines.next();
      if (done) throw new Error('verity-mcp closed its stdout');
      return JSON.parse(value as string) as Answer;
    },
  };
}

const ping = (id: number) => JSON.stringify({ jsonrpc: '2.0', id, method: 'ping' });

describe('verity-mcp over stdio: a line that is no JSON-RPC message', () => {
  it('is answered with a JSON-RPC error, never dropped in silence, and the lines after it are still served', async () => {
    const mcp = start();
    mcp.send(
      'not json at all',
      // A request whose params do not fit any message: its id can be read, so the error names it.
      JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tools/list', params: null }),
      // A batch: stdio carries one message a line.
      JSON.stringify([{ jsonrpc: '2.0', id: 4, method: 'ping' }]),
      // No JSON-RPC message at all.
      JSON.stringify({ id: 'five' }),
      '',
      ping(6),
    );
    expect(await mcp.next()).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32700 } });
    expect(await mcp.next()).toMatchObject({ jsonrpc: '2.0', id: 3, error: { code: -32600 } });
    expect(await mcp.next()).toMatchObject({
      jsonrpc: '2.0',
      id: null,
      error: { code: -32600, message: expect.stringContaining('one message per line') },
    });
    expect(await mcp.next()).toMatchObject({ jsonrpc: '2.0', id: 'five', error: { code: -32600 } });
    // The blank line is no message and asks for nothing: the next answer is the ping's.
    expect(await mcp.next()).toMatchObject({ jsonrpc: '2.0', id: 6, result: {} });
  });

  it('a line longer than the bound is answered and skipped to its end; the server keeps serving', async () => {
    const mcp = start();
    // 11 MiB of one line, written in pieces (past the 10 MiB bound), then a ping on the next line.
    const piece = 'x'.repeat(1024 * 1024);
    child!.stdin.write('{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"');
    for (let i = 0; i < 11; i += 1) child!.stdin.write(piece);
    mcp.send('"}}', ping(2));
    expect(await mcp.next()).toMatchObject({
      jsonrpc: '2.0',
      id: null,
      error: { code: -32600, message: expect.stringContaining('longer than') },
    });
    expect(await mcp.next()).toMatchObject({ jsonrpc: '2.0', id: 2, result: {} });
  }, 30_000);
});
