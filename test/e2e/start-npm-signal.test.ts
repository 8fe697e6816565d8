import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { isPortOpen } from '../../scripts/local-services';
import { NpmStartRun, alive } from '../support/npm-start';
import { DIST, waitFor } from '../support/stack';

/**
 * SIGTERM to the `npm start` process itself (what a process manager, `kill <pid>` or `timeout` sends; a terminal's
 * Ctrl-C reaches the whole process group instead) stops every app, leaves nothing listening, and npm exits 0. The
 * package's own `start` script runs under a real npm and shell; only its build step is replaced by a no-op (the
 * tests run on the build already made), in a scratch package whose `scripts` and `dist` are this checkout's.
 */

const ROOT = dirname(DIST);

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
  const run = new NpmStartRun('startnpm');
  let scratch = '';

  function started(): number[] {
    return run.started().map(({ pid }) => pid);
  }

  beforeAll(async () => {
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
    await run.start((env) => {
      // The npm that runs the scripts: the one beside this node.
      env.PATH = `${dirname(process.execPath)}:${process.env.PATH ?? ''}`;
      for (const name of Object.keys(env)) if (name.startsWith('npm_')) delete env[name];
      return spawn('npm', ['start'], { cwd: scratch, env, stdio: ['ignore', 'pipe', 'pipe'] });
    });
  }, 120_000);

  afterAll(async () => {
    if (run.running()) run.child?.kill('SIGKILL');
    // Whatever the test found, never leave the supervisor (the apps' parent) or its apps behind: the supervisor
    // first, so that it restarts nothing.
    const apps = started().filter(alive);
    for (const pid of apps) {
      const parent = parentOf(pid);
      if (parent !== null && alive(parent) && cmdline(parent).includes('start.js')) process.kill(parent, 'SIGKILL');
    }
    for (const pid of apps) if (alive(pid)) process.kill(pid, 'SIGKILL');
    await run.drop();
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  it('SIGTERM to npm stops every app, frees every port and exits 0', async () => {
    const children = started();
    expect(children).toHaveLength(4);
    await waitFor(
      async () => run.output,
      (text) => text.includes('dispatcher ready') && text.includes('reconciler ready'),
      30_000,
      100,
    );

    run.child?.kill('SIGTERM');
    expect(await run.exited).toEqual({ code: 0, signal: null });
    expect(run.output).toContain('SIGTERM received');
    expect(children.filter(alive)).toEqual([]);
    const listening: number[] = [];
    for (const port of run.ports) if (await isPortOpen('127.0.0.1', port, 500)) listening.push(port);
    expect(listening).toEqual([]);
  }, 60_000);
});
