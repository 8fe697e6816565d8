import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { type AppName, appNodeArgs } from '../../libs/platform/src/runtime';
import { charge, http, submission, unique } from '../support/http';
import { watchApi } from '../support/openapi-validator';
import { NpmStartRun, alive } from '../support/npm-start';
import { DEMO, DIST, waitFor } from '../support/stack';

/**
 * `npm start` supervises its apps: a dispatcher killed with SIGKILL is started again (and the log says so) while the
 * others, the sandbox provider with its record of effects among them, keep running; work then goes on. SIGTERM still
 * stops every child. Runs the compiled script against the test Postgres and Redis, with a database and prefix of its
 * own.
 */

interface Execution {
  id: string;
  status: string;
  operations: { status: string }[];
}

describe('npm start supervises its apps', () => {
  const run = new NpmStartRun('startsup');

  beforeAll(async () => {
    await run.start((env) =>
      spawn(process.execPath, [join(DIST, 'scripts', 'start.js')], { env, stdio: ['ignore', 'pipe', 'pipe'] }),
    );
    // Not started by a Stack: its responses are checked against /docs-json all the same.
    watchApi(run.apiUrl);
  }, 120_000);

  afterAll(async () => {
    // Only if the test failed before its own SIGTERM: never leave the children behind.
    if (run.running()) {
      run.child?.kill('SIGTERM');
      await Promise.race([run.exited, new Promise((r) => setTimeout(r, 20_000).unref())]);
    }
    for (const { pid } of run.started()) if (alive(pid)) process.kill(pid, 'SIGKILL');
    await run.drop();
  });

  it('starts each app with its own node flags (the API with its smaller young generation)', () => {
    const running = run.started().filter(({ pid }) => alive(pid));
    expect(running.map(({ app }) => app).sort()).toEqual(['api', 'dispatcher', 'reconciler', 'sandbox-provider']);
    for (const { app, pid } of running) {
      // The command line as the kernel has it: node, its flags, the entry point.
      const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      expect({ app, flags: argv.slice(1, -2) }).toEqual({ app, flags: appNodeArgs(app as AppName) });
    }
  });

  it('restarts a SIGKILLed dispatcher with backoff, keeps the others running, and SIGTERM stops every child', async () => {
    const first = new Map(run.started().map(({ app, pid }) => [app, pid]));
    expect([...first.keys()].sort()).toEqual(['api', 'dispatcher', 'reconciler', 'sandbox-provider']);
    const killed = first.get('dispatcher') as number;
    await waitFor(
      async () => run.output,
      (text) => text.includes('dispatcher ready'),
      30_000,
      100,
    );

    process.kill(killed, 'SIGKILL');
    // "started" and "restarted" are two lines that may reach this process in two reads: wait for the second.
    await waitFor(
      async () => run.output,
      (text) => /dispatcher restarted \(pid \d+\); the other apps kept running/.test(text),
      30_000,
      100,
    );
    expect(run.started().filter(({ app }) => app === 'dispatcher')).toHaveLength(2);
    expect(run.output).toContain('dispatcher stopped unexpectedly (signal SIGKILL); restarting it in 1 s');
    const restarted = run.started().filter(({ app }) => app === 'dispatcher')[1].pid;
    expect(restarted).not.toBe(killed);
    expect(alive(killed)).toBe(false);

    // Crashing again at once: the wait doubles, and the log says it is backing off.
    process.kill(restarted, 'SIGKILL');
    await waitFor(
      async () => run.started().filter(({ app }) => app === 'dispatcher').length,
      (count) => count === 3,
      30_000,
      100,
    );
    expect(run.output).toContain(
      'dispatcher stopped unexpectedly (signal SIGKILL); restarting it in 2 s (crash 2 in a row: backing off)',
    );
    // Nothing else was restarted, so the sandbox provider still holds what it recorded.
    for (const app of ['api', 'reconciler', 'sandbox-provider']) {
      expect(run.started().filter((s) => s.app === app)).toEqual([{ app, pid: first.get(app) }]);
      expect(alive(first.get(app) as number)).toBe(true);
    }

    // Work goes on: a payment submitted now is sent by the third dispatcher and verified.
    const reference = unique('supervised');
    const res = await http<Execution>(run.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([charge(reference)]),
    });
    expect(res.status).toBe(201);
    const done = await waitFor(
      async () => (await http<Execution>(run.apiUrl, 'GET', `/v1/executions/${res.body.id}`, { key: DEMO.agent })).body,
      (e) => e.status === 'completed',
      60_000,
      200,
    );
    expect(done.operations.map((o) => o.status)).toEqual(['VERIFIED']);
    expect(run.output).not.toContain('stopping everything');

    // SIGTERM: a clean stop of every child, and nothing restarted on the way out.
    const children = run.started().map(({ pid }) => pid);
    run.child?.kill('SIGTERM');
    expect((await run.exited).code).toBe(0);
    for (const pid of children) expect(alive(pid)).toBe(false);
    expect(run.started()).toHaveLength(children.length);
    expect(run.output).toContain('stopped');
  }, 180_000);
});
