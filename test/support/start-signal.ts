import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { appNodeArgs, type AppName } from '../../libs/platform/src/runtime';
import { DIST } from './stack';

/**
 * Where each process's main is built and whose node flags it runs with; `migrate` is the migration step
 * (`npm run migrate`), part of the API.
 */
const ENTRIES = {
  api: { app: 'api', main: ['apps', 'api', 'src', 'main.js'] },
  dispatcher: { app: 'dispatcher', main: ['apps', 'dispatcher', 'src', 'main.js'] },
  reconciler: { app: 'reconciler', main: ['apps', 'reconciler', 'src', 'main.js'] },
  migrate: { app: 'api', main: ['apps', 'api', 'src', 'migrate.js'] },
} as const satisfies Record<string, { app: AppName; main: readonly string[] }>;

/**
 * A signal while an app is still starting (or while the migration step runs): its main (from dist) is started with
 * `env` over this process's own and sent `signal` once `starting` has seen it under way (it may read what the app has
 * written so far). How it exited and everything it wrote (killed if it is still running when this ends otherwise).
 */
export async function signalWhileStarting(
  app: keyof typeof ENTRIES,
  env: NodeJS.ProcessEnv,
  signal: NodeJS.Signals,
  starting: (written: () => string) => Promise<unknown>,
): Promise<{ exit: { code: number | null; signal: string | null }; output: string }> {
  const output: string[] = [];
  const child = spawn(process.execPath, [...appNodeArgs(ENTRIES[app].app), join(DIST, ...ENTRIES[app].main)], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout.on('data', (chunk: Buffer) => output.push(chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => output.push(chunk.toString()));
  const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) =>
    child.on('exit', (code, sig) => resolve({ code, signal: sig })),
  );
  try {
    await starting(() => output.join(''));
    child.kill(signal);
    const exit = await exited;
    return { exit, output: output.join('') };
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
}
