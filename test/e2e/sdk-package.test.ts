import { type ChildProcessWithoutNullStreams, execFile, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { getDefaultEnvironment } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ReadBuffer, serializeMessage } from '@modelcontextprotocol/sdk/shared/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { unique } from '../support/http';
import { Stack } from '../support/stack';
// The tools the MCP server serves (test/e2e/mcp.test.ts checks what each does).
import { MCP_TOOLS } from '../support/mcp-tools';

const ROOT = join(__dirname, '..', '..');
const SDK = join(ROOT, 'libs', 'sdk');
const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
const NPM = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const run = promisify(execFile);

/**
 * An MCP client's stdio transport to a server process it spawns (the SDK's framing: one JSON-RPC message a line), its
 * own so that the process's exit can be watched: the SDK's StdioClientTransport keeps its child to itself. Closing it
 * ends the server's stdin, as MCP hosts do.
 */
class SpawnedStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;
  /** Everything the server wrote on stderr so far. */
  stderr = '';
  /** How the server exited; set by start. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }> = Promise.reject(new Error('not started'));
  private child: ChildProcessWithoutNullStreams | undefined;
  private readonly buffer = new ReadBuffer();

  constructor(
    private readonly command: string,
    private readonly args: string[],
    private readonly options: { cwd: string; env: NodeJS.ProcessEnv },
  ) {
    this.exited.catch(() => undefined);
  }

  start(): Promise<void> {
    const child = spawn(this.command, this.args, { ...this.options, stdio: ['pipe', 'pipe', 'pipe'] });
    this.child = child;
    this.exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    child.stderr.on('data', (chunk: Buffer) => (this.stderr += chunk.toString()));
    child.stdout.on('data', (chunk: Buffer) => {
      this.buffer.append(chunk);
      try {
        for (let message = this.buffer.readMessage(); message; message = this.buffer.readMessage()) {
          this.onmessage?.(message);
        }
      } catch (error) {
        this.onerror?.(error as Error);
      }
    });
    child.once('close', () => this.onclose?.());
    return new Promise((resolve, reject) => {
      child.once('spawn', () => resolve());
      child.once('error', reject);
    });
  }

  send(message: JSONRPCMessage): Promise<void> {
    return new Promise((resolve, reject) =>
      this.child?.stdin.write(serializeMessage(message), (error) => (error ? reject(error) : resolve())),
    );
  }

  async close(): Promise<void> {
    this.child?.stdin.end();
  }

  /** Ends the server if it is still running (a test that failed before closing it). */
  kill(): void {
    if (this.child && this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
  }
}

/**
 * Loads `@verity/sdk/mcp` as a user's CommonJS or ES module would and builds the server with the factory the README
 * names; prints what it found. A file the package left out (say one the MCP module compiles in from another lib)
 * fails the `require`/`import` itself.
 */
function mcpScript(kind: 'cjs' | 'esm'): string {
  const imports =
    kind === 'esm'
      ? `import { Verity } from '@verity/sdk';\nimport * as mcp from '@verity/sdk/mcp';`
      : `const { Verity } = require('@verity/sdk');\nconst mcp = require('@verity/sdk/mcp');`;
  return `${imports}
const built = mcp.createVerityMcpServer({ client: new Verity({ baseUrl: 'http://127.0.0.1:9', apiKey: 'unused' }) });
console.log(JSON.stringify({
  factory: typeof mcp.createVerityMcpServer,
  connect: typeof built.server.connect,
  close: typeof built.close,
}));
built.close();
`;
}

/** The script a user would write: create, stream to the end, waitForSettled, and a typed refusal. */
function script(kind: 'cjs' | 'esm'): string {
  const imports =
    kind === 'esm'
      ? `import { Verity, VerityNotFoundError, type Execution, type ExecutionEvent, type OperationStatus } from '@verity/sdk';`
      : `import { Verity, VerityNotFoundError } from '@verity/sdk';\nimport type { Execution, ExecutionEvent, OperationStatus } from '@verity/sdk';`;
  return `${imports}

async function main(): Promise<void> {
  const dx = new Verity({ baseUrl: process.env.VERITY_URL!, apiKey: 'demo-agent-key' });
  const created: Execution = await dx.executions.create({
    agent_id: 'billing-bot',
    intent: 'Charge an order (${kind})',
    operations: [
      {
        key: 'charge',
        connector: 'sandbox.payments',
        action: 'charge',
        params: { amount: 1250, currency: 'EUR', reference: process.env.REFERENCE! },
      },
    ],
  });
  const types: string[] = [];
  const stream = dx.stream(created.id);
  for await (const event of stream) {
    const typed: ExecutionEvent = event;
    types.push(typed.type);
  }
  const settled = await dx.waitForSettled(created.id, { timeoutMs: 30_000 });
  const status: OperationStatus = settled.operations[0].status;
  // @ts-expect-error the SDK's types are real: an execution status is no number
  const notANumber: number = settled.status;
  let refusal = '';
  try {
    await dx.get('exe_01nothere');
  } catch (error) {
    if (error instanceof VerityNotFoundError) refusal = error.code;
  }
  console.log(JSON.stringify({ status: settled.status, operation: status, types, end: stream.endReason, refusal, notANumber: typeof notANumber }));
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
`;
}

/**
 * The SDK as a user gets it: `npm pack` (which builds it: prepack), installed from the tarball into an empty project,
 * a strict TypeScript script compiled against what the package ships, run against a real stack as CommonJS and as
 * an ES module; `@verity/sdk/mcp` loaded both ways, and the `verity-mcp` bin the install links served over stdio.
 */
describe('the SDK package (libs/sdk)', () => {
  let stack: Stack;
  let dir: string;
  let tarball: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'verity-sdk-package-'));
    const packed = run(NPM, ['pack', '--pack-destination', dir, '--json'], { cwd: SDK, timeout: 120_000 });
    // Both settle before either's failure is thrown: a pack that failed while the stack booted left the stack (its
    // database, its apps) unknown to afterAll, running on after the file.
    const [started, packing] = await Promise.allSettled([Stack.start({ label: 'sdkpackage' }), packed]);
    if (started.status === 'fulfilled') stack = started.value;
    for (const settled of [started, packing]) if (settled.status === 'rejected') throw settled.reason;
    tarball = join(
      dir,
      readdirSync(dir).find((f) => f.endsWith('.tgz'))!,
    );
  }, 120_000);
  /** The empty project with the tarball installed: made once, for whichever test asks first. */
  let installing: Promise<string> | undefined;
  const installed = () =>
    (installing ??= (async () => {
      const project = join(dir, 'project');
      await run('mkdir', ['-p', project]);
      writeFileSync(
        join(project, 'package.json'),
        JSON.stringify({ name: 'scratch', private: true, version: '1.0.0' }),
      );
      // Offline when the dependencies are in the npm cache, as they are after the repo's npm ci.
      await run(NPM, ['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts', tarball], {
        cwd: project,
        timeout: 120_000,
      });
      return project;
    })());
  /** Closed after the tests, so a failed assertion leaves no verity-mcp running. */
  const clients: Client[] = [];
  const transports: SpawnedStdioTransport[] = [];
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
    for (const transport of transports) transport.kill();
    if (dir) rmSync(dir, { recursive: true, force: true });
    await stack?.stop();
  });

  it('ships its build, ESM and CJS entries with types, a README and a version', async () => {
    const { stdout } = await run('tar', ['-tzf', tarball]);
    const files = stdout.split('\n').filter(Boolean);
    expect(files).toEqual(
      expect.arrayContaining([
        'package/package.json',
        'package/README.md',
        'package/dist/index.mjs',
        'package/dist/index.d.mts',
        'package/dist/sdk/src/index.js',
        'package/dist/sdk/src/index.d.ts',
      ]),
    );
    expect(files.filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts') && !f.endsWith('.d.mts'))).toEqual([]);
    const manifest = JSON.parse(readFileSync(join(SDK, 'package.json'), 'utf8')) as {
      version: string;
      exports: Record<string, unknown>;
    };
    expect(manifest.version).toMatch(/^\d+\.\d+\.\d+/);
    expect(manifest.exports['.']).toEqual({
      import: { types: './dist/index.d.mts', default: './dist/index.mjs' },
      require: { types: './dist/sdk/src/index.d.ts', default: './dist/sdk/src/index.js' },
    });
  });

  it('installs from the tarball and runs a strict TypeScript script as CommonJS and as an ES module', async () => {
    const project = await installed();
    writeFileSync(join(project, 'check.cts'), script('cjs'));
    writeFileSync(join(project, 'check.mts'), script('esm'));
    writeFileSync(
      join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          module: 'node16',
          moduleResolution: 'node16',
          target: 'es2022',
          lib: ['es2023'],
          outDir: 'out',
          // The package's own declarations are checked too, not skipped.
          skipLibCheck: false,
          typeRoots: [join(ROOT, 'node_modules', '@types')],
          types: ['node'],
        },
        files: ['check.cts', 'check.mts'],
      }),
    );
    const compiled = await run(process.execPath, [TSC, '-p', project], { cwd: project, timeout: 60_000 }).catch(
      (error: { stdout?: string }) => ({ stdout: `tsc failed:\n${error.stdout}` }),
    );
    expect(compiled.stdout).toBe('');

    for (const entry of ['check.cjs', 'check.mjs']) {
      const { stdout } = await run(process.execPath, [join(project, 'out', entry)], {
        cwd: project,
        timeout: 45_000,
        env: { ...process.env, VERITY_URL: stack.apiUrl, REFERENCE: unique(`pkg-${entry}`) },
      });
      const result = JSON.parse(stdout.trim().split('\n').pop()!) as {
        status: string;
        operation: string;
        types: string[];
        end: string;
        refusal: string;
      };
      expect([entry, result.status, result.operation, result.end, result.refusal]).toEqual([
        entry,
        'completed',
        'VERIFIED',
        'settled',
        'not-found',
      ]);
      expect(result.types).toEqual(expect.arrayContaining(['execution.created', 'operation.status_changed']));
    }
  });

  it('loads @verity/sdk/mcp from the tarball with require and import, its factory building a server', async () => {
    const project = await installed();
    writeFileSync(join(project, 'mcp-check.cjs'), mcpScript('cjs'));
    writeFileSync(join(project, 'mcp-check.mjs'), mcpScript('esm'));
    const loaded = await Promise.all(
      ['mcp-check.cjs', 'mcp-check.mjs'].map((entry) =>
        run(process.execPath, [join(project, entry)], { cwd: project, timeout: 30_000 }).then(
          ({ stdout }) => [entry, stdout.trim()],
          (error: { stderr?: string }) => [entry, `failed:\n${error.stderr}`],
        ),
      ),
    );
    const works = JSON.stringify({ factory: 'function', connect: 'function', close: 'function' });
    expect(loaded).toEqual([
      ['mcp-check.cjs', works],
      ['mcp-check.mjs', works],
    ]);
  });

  it('runs the verity-mcp bin it installs over stdio against the stack: initialize, tools/list, then a clean end', async () => {
    const project = await installed();
    const client = new Client({ name: 'verity-sdk-package-e2e', version: '1.0.0' });
    clients.push(client);
    const transport = new SpawnedStdioTransport(
      // The bin npm linked from the package's "bin" (its #!/usr/bin/env node finds this Node first on the PATH).
      join(project, 'node_modules', '.bin', 'verity-mcp'),
      ['--url', stack.apiUrl],
      {
        cwd: project,
        env: {
          ...getDefaultEnvironment(),
          PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH ?? ''}`,
          VERITY_API_KEY: 'demo-agent-key',
        },
      },
    );
    transports.push(transport);
    try {
      await client.connect(transport); // initialize, then notifications/initialized
    } catch (error) {
      throw new Error(`verity-mcp did not initialize: ${(error as Error).message}\nstderr:\n${transport.stderr}`);
    }
    expect(client.getServerVersion()?.name).toBeTruthy();
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(MCP_TOOLS);
    // A call through the packaged client to the stack: the bin talks to the API, not only to its host.
    const listed = await client.callTool({ name: 'list_connectors', arguments: {} });
    expect(listed.isError).toBeFalsy();
    expect(JSON.stringify(listed.content)).toContain('sandbox.payments');
    // The host ends it as MCP hosts do (stdin closed): it exits 0, and says nothing went wrong.
    await client.close();
    expect(await transport.exited).toEqual({ code: 0, signal: null });
    expect(transport.stderr).toBe('');
  });
});
