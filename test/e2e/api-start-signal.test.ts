import { spawn } from 'node:child_process';
import { join } from 'node:path';
import type { QueryRunner } from 'typeorm';
import { MIGRATION_LOCK, MIGRATION_LOCK_WAITING, MIGRATION_SQL } from '@verity/persistence';
import { appNodeArgs } from '../../libs/platform/src/runtime';
import { signalWhileStarting } from '../support/start-signal';
import { DIST, Stack, freePort, waitFor } from '../support/stack';

/**
 * SIGTERM while the API is still starting: here waiting for the migration lock another replica holds (a rollout
 * that replaces pods while one migrates). It stops at once with exit 0; the lock and the schema stay as they were. Before: no handler was installed until the API listened, so Node's default ended it by the signal (no exit
 * code, nothing logged).
 */
describe('SIGTERM during start-up', () => {
  let stack: Stack;
  let holder: QueryRunner | undefined;

  beforeAll(async () => {
    stack = await Stack.start({ label: 'apistartsig', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => {
    await holder?.release().catch(() => undefined);
    await stack?.stop();
  });

  it.each(['SIGTERM', 'SIGINT'] as const)(
    '%s while waiting for the migration lock: exit 0, logged, and the next replica can migrate',
    async (signal) => {
      holder = stack.db.dataSource.createQueryRunner();
      await holder.connect();
      expect(await holder.query(MIGRATION_SQL.tryLock, [MIGRATION_LOCK])).toEqual([{ locked: true }]);
      const [{ pid: holderPid }] = (await holder.query('SELECT pg_backend_pid() AS pid')) as { pid: number }[];
      try {
        const stopped = await signalWhileStarting(
          'api',
          { ...stack.env, PORT: String(await freePort()), RUN_MIGRATIONS: 'true' },
          signal,
          // The API says it waits for the lock, and its session is idle between tries for it (not in a statement that
          // waits). This database's only: test files starting beside this one take locks of their own.
          async (written) => {
            await waitFor(
              async () => written(),
              (text) => text.includes(MIGRATION_LOCK_WAITING),
              20_000,
              50,
            );
            await waitFor(
              async () =>
                (await stack.db.dataSource.query(
                  `SELECT state, wait_event_type FROM pg_stat_activity
                    WHERE datname = current_database() AND query = $1 AND pid <> $2`,
                  [MIGRATION_SQL.tryLock, holderPid],
                )) as { state: string; wait_event_type: string | null }[],
              (sessions) => sessions.length === 1 && sessions[0].state === 'idle',
              20_000,
              50,
            );
          },
        );
        expect(stopped.exit).toEqual({ code: 0, signal: null });
        expect(stopped.output).toContain(MIGRATION_LOCK_WAITING);
        expect(stopped.output).toContain('stopped while starting');
      } finally {
        await holder.query(MIGRATION_SQL.unlock, [MIGRATION_LOCK]);
        await holder.release();
        holder = undefined;
      }
      // The next replica can take the lock (the stopped API's session, which Postgres ends only once its wait is
      // over, lets it go).
      const next = stack.db.dataSource.createQueryRunner();
      try {
        await waitFor(
          async () => ((await next.query(MIGRATION_SQL.tryLock, [MIGRATION_LOCK])) as { locked: boolean }[])[0].locked,
          (ok) => ok,
          10_000,
          50,
        );
        await next.query(MIGRATION_SQL.unlock, [MIGRATION_LOCK]);
      } finally {
        await next.release();
      }
    },
    60_000,
  );

  it('PORT=0: the API listens on a port the system picks and logs that port, not 0', async () => {
    const child = spawn(process.execPath, [...appNodeArgs('api'), join(DIST, 'apps', 'api', 'src', 'main.js')], {
      env: { ...process.env, ...stack.env, PORT: '0', HOST: '127.0.0.1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      const line = await waitFor(
        async () => output.split('\n').find((text) => text.includes('api listening')),
        (found) => found !== undefined,
        30_000,
        50,
      );
      const port = (JSON.parse(line ?? '{}') as { port?: number }).port;
      expect(port).toBeGreaterThan(0);
      expect((await fetch(`http://127.0.0.1:${port}/health/live`)).status).toBe(200);
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  });
});
