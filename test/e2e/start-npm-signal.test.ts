import { ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { isPortOpen } from '../../scripts/local-services';
import {
  clearRedisPrefix,
  createTestDatabase,
  TEST_REDIS_URL,
  TestDatabase,
  testQueuePrefix,
} from '../support/services';
import { DIST, TEST_TIMINGS, freePort, waitFor } from '../support/stack';

/**
 * SIGTERM to the `npm start` process itself (what a process manager, `kill <pid>` or `timeout` sends; a terminal's
 * Ctrl-C reaches the whole process group instead) stops every app, leaves nothing listening, and npm exits 0. The
 * package's own `start` script runs under a real npm and shell; only its build step is replaced by a no-op (the
 * tests run on the build already made), in a scratch package whose `scripts` and `dist` are this checkout's.
 */

const ROOT = dirname(DIST);

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return '';
  }
}

function parentOf(pid: number): number | null {
  try {
    // /proc/<pid>/stat: "pid (comm) state ppid …"; comm may hold spaces, so read after its closing parenthesis.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return null;
  }
}

describe('npm start, signalled through npm', () => {
  let db: TestDatabase;
  let prefix = '';
  let scratch = '';
  let npm: ChildProcess | null = null;
  let exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  let output = '';
  const ports: number[] = [];

  function started(): number[] {
    return [...output.matchAll(/started \S+ \(pid (\d+)\)/g)].map((m) => Number(m[1]));
  }

  beforeAll(async () => {
    db = await createTestDatabase('startnpm');
    prefix = testQueuePrefix('startnpm');
    for (let i = 0; i < 4; i++) ports.push(await freePort());
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    scratch = mkdtempSync(join(tmpdir(), 'verity-npm-start-'));
    writeFileSync(
      join(scratch, 'package.json'),
      JSON.stringify({
        name: 'verity-npm-start',
        private: true,
        scripts: { start: pkg.scripts.start, build: 'node -e 0' },
      }),
    );
    symlinkSync(join(ROOT, 'scripts'), join(scratch, 'scripts'));
    symlinkSync(DIST, join(scratch, 'dist'));
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      ...TEST_TIMINGS,
      NODE_ENV: 'test',
      NO_COLOR: '1',
      DATABASE_URL: db.url,
      REDIS_URL: TEST_REDIS_URL,
      QUEUE_PREFIX: prefix,
      PORT: String(ports[0]),
      SANDBOX_PORT: String(ports[1]),
      DISPATCHER_METRICS_PORT: String(ports[2]),
      RECONCILER_METRICS_PORT: String(ports[3]),
      // The npm that runs the scripts: the one beside this node.
      PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ''}`,
    };
    delete env.SANDBOX_URL;
    for (const name of Object.keys(env)) if (name.startsWith('npm_')) delete env[name];
    npm = spawn('npm', ['start'], { cwd: scratch, env, stdio: ['ignore', 'pipe', 'pipe'] });
    npm.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    npm.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    exited = new Promise((resolve) => npm?.on('exit', (code, signal) => resolve({ code, signal })));
    await waitFor(
      async () => output,
      (text) => text.includes('Verity is running') || npm?.exitCode !== null,
      90_000,
      100,
    );
    if (!output.includes('Verity is running')) throw new Error(`npm start did not come up:\n${output}`);
  }, 120_000);

  afterAll(async () => {
    if (npm && npm.exitCode === null && npm.signalCode === null) npm.kill('SIGKILL');
    // Whatever the test found, never leave the supervisor (the apps' parent) or its apps behind: the supervisor
    // first, so that it restarts nothing.
    const apps = started().filter(alive);
    for (const pid of apps) {
      const parent = parentOf(pid);
      if (parent !== null && alive(parent) && cmdline(parent).includes('start.js')) process.kill(parent, 'SIGKILL');
    }
    for (const pid of apps) if (alive(pid)) process.kill(pid, 'SIGKILL');
    await db?.drop().catch(() => undefined);
    await clearRedisPrefix(prefix).catch(() => undefined);
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  it('SIGTERM to npm stops every app, frees every port and exits 0', async () => {
    const children = started();
    expect(children).toHaveLength(4);
    await waitFor(
      async () => output,
      (text) => text.includes('dispatcher ready') && text.includes('reconciler ready'),
      30_000,
      100,
    );

    npm?.kill('SIGTERM');
    expect(await exited).toEqual({ code: 0, signal: null });
    expect(output).toContain('SIGTERM received');
    expect(children.filter(alive)).toEqual([]);
    const listening: number[] = [];
    for (const port of ports) if (await isPortOpen('127.0.0.1', port, 500)) listening.push(port);
    expect(listening).toEqual([]);
  }, 60_000);
});
