import { DEMO, RunningApp, Stack } from '../support/stack';
import { charge, http, unique } from '../support/http';
import { settle, submit } from './dispatcher-helpers';

/**
 * An app whose stdout/stderr reader is gone (the supervisor that piped its output died: `npm start`'s start.js, a log
 * shipper) keeps running and serving — every line it logs then meets a broken pipe — and when told to stop, stops
 * cleanly: exit 0, within its own SHUTDOWN_GRACE_MS (never its forced exit 1, never hung past it).
 */
/** SHUTDOWN_GRACE_MS unset: its default. */
const GRACE_MS = 25_000;

describe('SIGTERM after the reader of an app’s output is gone', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'stdoutgone' });
  }, 120_000);
  afterAll(async () => stack?.stop());

  it('every app keeps serving with its output pipes closed, then exits 0 on SIGTERM within its grace', async () => {
    const apps = ['sandbox-provider', 'api', 'dispatcher', 'reconciler'].map(
      (name) => stack.running(name as RunningApp['name'])[0],
    );
    // The read ends close: from now on every write to the app's stdout or stderr fails with EPIPE.
    for (const app of apps) {
      app.child.stdout?.destroy();
      app.child.stderr?.destroy();
    }
    // Each one logs with nobody reading: a request (api, sandbox provider), a dispatch (dispatcher), a reconcile and
    // sweeps (reconciler) — a charge goes all the way to VERIFIED, and both workers' ops ports still answer.
    const created = await submit(stack, [charge(unique('stdout-gone'))]);
    const settled = await settle(stack, created.id);
    expect(settled.operations.map((o) => o.status)).toEqual(['VERIFIED']);
    await stack.sweepsPassed(2);
    expect((await http(stack.apiUrl, 'GET', '/v1/executions/' + created.id, { key: DEMO.agent })).status).toBe(200);
    for (const app of apps.filter((a) => a.opsUrl)) {
      expect((await fetch(`${app.opsUrl}/health/live`)).status).toBe(200);
    }
    for (const app of apps)
      expect({ app: app.name, exitCode: app.child.exitCode }).toEqual({ app: app.name, exitCode: null });

    // Told to stop, each stops on its own: the exit is waited for, and timed.
    const stopped = await Promise.all(
      apps.map(async (app) => {
        app.child.kill('SIGTERM');
        // Its own grace, and a little more for the forced exit it would take at the end of it: a hang is reported as such.
        let timer: NodeJS.Timeout | undefined;
        const code = await Promise.race([
          app.exited,
          new Promise<'hung'>((resolve) => (timer = setTimeout(() => resolve('hung'), GRACE_MS + 5_000))),
        ]);
        clearTimeout(timer);
        // 0: its stop finished within its grace (past it, the forced exit is 1).
        return { app: app.name, code, signal: app.child.signalCode };
      }),
    );
    expect(stopped).toEqual(apps.map((app) => ({ app: app.name, code: 0, signal: null })));
  }, 120_000);
});
