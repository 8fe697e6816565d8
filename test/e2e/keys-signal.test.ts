import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { createApiKey } from '@verity/persistence/api-keys';
import { waitForLockWaiter } from '../support/lock-waits';
import { DIST, waitFor } from '../support/stack';
import { useTestDatabase } from '../support/test-database';

/** The keys CLI run with `args`: what it writes, and how it exits. */
function keys(url: string, ...args: string[]) {
  return keysWith({}, url, ...args);
}

/** The keys CLI run with `args` and more variables in its environment. */
function keysWith(env: Record<string, string>, url: string, ...args: string[]) {
  const child = spawn(process.execPath, [join(DIST, 'apps', 'api', 'src', 'keys.cli.js'), ...args], {
    env: { ...process.env, DATABASE_URL: url, NODE_ENV: 'test', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return { child, exited, stdout: () => stdout, stderr: () => stderr };
}

/**
 * The keys CLI signalled (an operator's Ctrl-C, a job runner's SIGTERM) while its command is under way. Until
 * 2026-12-06 it had no handler: ended by the signal in the middle of a revocation, it said nothing, and the operator
 * could not tell whether the key still worked.
 */
describe('the keys CLI on SIGTERM/SIGINT', () => {
  const db = useTestDatabase('keyssig', ['acme']);
  const running: ReturnType<typeof keys>[] = [];
  afterEach(() => {
    for (const cli of running.splice(0)) if (cli.child.exitCode === null) cli.child.kill('SIGKILL');
  });

  /**
   * A revocation of a new key by the CLI (`keys revoke <id> …args`) while another session holds the key's row: once it
   * waits for that row it is sent `signal`, and `then` runs when it has said it is finishing (or has exited), the row
   * still held; `commit` lets the revocation go on.
   */
  async function signalledWhileWaiting(
    signal: NodeJS.Signals,
    args: string[],
    then: (cli: ReturnType<typeof keys>, id: string, commit: () => Promise<void>) => Promise<void>,
  ): Promise<void> {
    const { id } = await createApiKey(db.dataSource.manager, { tenantId: 'acme', role: 'agent' });
    const other = db.dataSource.createQueryRunner();
    await other.connect();
    try {
      await other.startTransaction();
      await other.query('SELECT id FROM api_keys WHERE id = $1 FOR UPDATE', [id]);
      const cli = keys(db.url, 'revoke', id, ...args);
      running.push(cli);
      let exited = false;
      void cli.exited.then(() => (exited = true));
      await waitForLockWaiter(db.dataSource, { statementLike: '%api_keys%', unless: () => exited });
      cli.child.kill(signal);
      await waitFor(
        async () => ({ exited, stderr: cli.stderr() }),
        (seen) => seen.exited || seen.stderr.includes(`keys: ${signal}: finishing`),
        20_000,
        50,
      );
      await then(cli, id, () => other.commitTransaction());
    } finally {
      if (other.isTransactionActive) await other.rollbackTransaction();
      await other.release();
    }
  }

  it.each(['SIGTERM', 'SIGINT'] as const)(
    '%s while a revocation waits for the key’s row: it says so, the revocation finishes and is printed, exit 0',
    (signal) =>
      signalledWhileWaiting(signal, ['--json'], async (cli, id, commit) => {
        await commit();
        expect(await cli.exited).toEqual({ code: 0, signal: null });
        expect(cli.stderr()).toContain(`keys: ${signal}: finishing the command under way`);
        const [{ revoked_at: at }] = (await db.dataSource.query('SELECT revoked_at FROM api_keys WHERE id = $1', [
          id,
        ])) as { revoked_at: Date | null }[];
        expect(at).not.toBeNull();
        expect(JSON.parse(cli.stdout())).toMatchObject({ id, revoked: true, revoked_at: at!.toISOString() });
      }),
    60_000,
  );

  it(
    'a second signal stops it at once: exit 1, saying how to check whether the command took effect',
    () =>
      signalledWhileWaiting('SIGINT', [], async (cli) => {
        cli.child.kill('SIGINT');
        // Its row still held: only the second signal can have ended it.
        expect(await cli.exited).toEqual({ code: 1, signal: null });
        expect(cli.stderr()).toContain(
          'keys: SIGINT: stopped before the command finished; whether it took effect: npm run keys -- list',
        );
        expect(cli.stdout()).toBe('');
      }),
    60_000,
  );
});

/**
 * A command whose statement waits on a row another session holds (a transaction left open, a stuck writer) gives up
 * after DATABASE_QUERY_TIMEOUT_MS, as the apps' statements do: a clear line and exit 75 (run it again), its
 * transaction rolled back. Without a bound it waited for as long as the row was held, saying nothing.
 */
describe('the keys CLI on a locked row', () => {
  const db = useTestDatabase('keyslock', ['acme']);

  it('a revocation waiting on a held row gives up: exit 75, saying why and that nothing took effect', async () => {
    const { id } = await createApiKey(db.dataSource.manager, { tenantId: 'acme', role: 'agent' });
    const other = db.dataSource.createQueryRunner();
    await other.connect();
    let cli: ReturnType<typeof keys> | undefined;
    try {
      await other.startTransaction();
      await other.query('SELECT id FROM api_keys WHERE id = $1 FOR UPDATE', [id]);
      cli = keysWith({ DATABASE_QUERY_TIMEOUT_MS: '500' }, db.url, 'revoke', id);
      const exited = await Promise.race([
        cli.exited,
        new Promise<'still waiting'>((resolve) => setTimeout(() => resolve('still waiting'), 20_000).unref()),
      ]);
      if (exited === 'still waiting') cli.child.kill('SIGKILL');
      expect(exited).toEqual({ code: 75, signal: null });
      expect(cli.stderr()).toContain('did not answer within 500 ms');
      expect(cli.stderr()).toContain('no key was created or revoked');
      expect(cli.stdout()).toBe('');
    } finally {
      if (other.isTransactionActive) await other.rollbackTransaction();
      await other.release();
      if (cli?.child.exitCode === null) cli.child.kill('SIGKILL');
    }
    const [{ revoked_at: at }] = (await db.dataSource.query('SELECT revoked_at FROM api_keys WHERE id = $1', [id])) as {
      revoked_at: Date | null;
    }[];
    expect(at).toBeNull();
  }, 60_000);
});
