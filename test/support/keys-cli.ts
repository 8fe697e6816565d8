import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { APP_COMPILE_CACHE, DIST } from './stack';

const run = promisify(execFile);

/** The built keys CLI run against `databaseUrl` with `args`, to its exit: its code and what it printed. */
export async function runKeysCli(
  databaseUrl: string,
  ...args: string[]
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [join(DIST, 'apps/api/src/keys.cli.js'), ...args], {
      // Node's compile cache, as the stacks' apps have it: the CLI is run some sixty times in a test run.
      env: { ...process.env, NODE_COMPILE_CACHE: APP_COMPILE_CACHE, DATABASE_URL: databaseUrl, NODE_ENV: 'test' },
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}
