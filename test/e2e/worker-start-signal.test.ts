import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { Socket, connect, createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { appNodeArgs } from '../../libs/platform/src/runtime';
import { TEST_REDIS_URL, createTestDatabase } from '../support/services';
import { signalWhileStarting } from '../support/start-signal';
import { DIST, waitFor } from '../support/stack';

/**
 * SIGTERM while a worker is still starting: here while it waits for a Postgres that accepted its connection and says
 * nothing (a database still coming up, a rollout that replaces pods while they start). Before: no handler was
 * installed until the worker had built its workers and served its metrics port, so Node's default ended it by the
 * signal (no exit code, nothing logged), as the API was until it had its own.
 */
describe('worker SIGTERM during start-up', () => {
  it.each([
    ['dispatcher', 'SIGTERM'],
    ['reconciler', 'SIGINT'],
  ] as const)(
    '%s, %s while it connects to Postgres: exit 0, logged',
    async (app, signal) => {
      const sessions = new Set<Socket>();
      const silent = createServer((socket) => {
        sessions.add(socket);
        socket.on('error', () => undefined);
      });
      await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
      const { port } = silent.address() as AddressInfo;
      try {
        const stopped = await signalWhileStarting(
          app,
          {
            DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/verity`,
            REDIS_URL: TEST_REDIS_URL,
            DISPATCHER_METRICS_PORT: '0',
            RECONCILER_METRICS_PORT: '0',
            LOG_LEVEL: 'info',
          },
          signal,
          // Its Postgres session is open and waits for an answer that does not come.
          () =>
            waitFor(
              async () => sessions.size,
              (n) => n > 0,
              20_000,
              20,
            ),
        );
        expect(stopped.exit).toEqual({ code: 0, signal: null });
        expect(stopped.output).toContain('stopped while starting');
      } finally {
        for (const socket of sessions) socket.destroy();
        await new Promise((resolve) => silent.close(resolve));
      }
    },
    60_000,
  );
});

/**
 * Nest builds a worker's BullMQ workers, which take jobs at once, inside its creation of the app (it runs the app's
 * init). A signal then must be the orderly stop, never "stopped while starting" (exit 0 at once, a job it had taken
 * abandoned), as it was when the hand-over came after that creation.
 */
describe('worker SIGTERM while Nest builds its workers', () => {
  it('is the orderly stop: it waits for the app, not "stopped while starting"', async () => {
    // Redis answers the start-up check and the producer's connection, and nothing after: the workers' connections are
    // refused, so the app's init waits (its sweep worker for its connection) with the workers built.
    const upstream = new URL(TEST_REDIS_URL);
    let connections = 0;
    const sockets = new Set<Socket>();
    const link = createServer((client) => {
      connections += 1;
      sockets.add(client);
      client.on('error', () => undefined);
      if (connections > 2) return void client.destroy();
      const server = connect(Number(upstream.port || 6379), upstream.hostname);
      sockets.add(server);
      server.on('error', () => undefined);
      client.pipe(server).pipe(client);
    });
    await new Promise<void>((resolve) => link.listen(0, '127.0.0.1', resolve));
    const db = await createTestDatabase('startsig');
    const output: string[] = [];
    const main = join(DIST, 'apps', 'reconciler', 'src', 'main.js');
    const child = spawn(process.execPath, [...appNodeArgs('reconciler'), main], {
      env: {
        ...process.env,
        DATABASE_URL: db.url,
        REDIS_URL: `redis://127.0.0.1:${(link.address() as AddressInfo).port}`,
        QUEUE_PREFIX: `{startsig-${process.pid}-${Date.now()}}`,
        RECONCILER_METRICS_PORT: '0',
        LOG_LEVEL: 'info',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      // A worker is built: its watcher logged its refused connection.
      await waitFor(
        async () => output.join(''),
        (text) => text.includes('worker error: Redis unreachable'),
        30_000,
        20,
      );
      child.kill('SIGTERM');
      await waitFor(
        async () => output.join(''),
        (text) => text.includes('"shutting down"') || child.exitCode !== null,
        20_000,
        20,
      );
      expect(output.join('')).not.toContain('stopped while starting');
      expect(output.join('')).toContain('"shutting down"');
    } finally {
      child.kill('SIGKILL');
      await exited;
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => link.close(resolve));
      await db.drop();
    }
  }, 60_000);
});

/**
 * A signal that arrives while a process is busy just before it hands start-up over to the orderly stop (the API after
 * it listens, a worker after its Nest context is built). Node keeps one watcher per signal while it has a listener:
 * the hand-over removed the start-up listeners before `onShutdown` added its own, the watcher was closed in between,
 * and a signal caught but not yet delivered went with it. The process ran on, signalled and not stopping.
 */
describe('a signal that arrives as start-up hands over to the orderly stop', () => {
  it('is not lost: the orderly stop runs', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'verity-handover-'));
    const flag = join(dir, 'signalled');
    // The child is busy (a synchronous loop) while the signal arrives, then hands over in that same turn, then asks
    // itself, with a later signal, whether the first one was heard: signals are delivered in the order they came.
    const child = spawn(
      process.execPath,
      [
        '-e',
        `
        const { existsSync } = require('node:fs');
        const { stopWhileStarting, onShutdown } = require(process.argv[1]);
        const seen = [];
        const logger = { info: (_fields, msg) => seen.push(msg), error: (_fields, msg) => seen.push(msg) };
        const started = stopWhileStarting(logger);
        setImmediate(() => {
          process.stdout.write('busy\\n');
          while (!existsSync(process.argv[2]));
          started();
          onShutdown(logger, () => new Promise(() => undefined), 60_000);
          process.on('SIGUSR2', () => {
            process.exit(seen.includes('shutting down') ? 0 : 3);
          });
          process.kill(process.pid, 'SIGUSR2');
        });
        `,
        join(DIST, 'libs', 'platform', 'src', 'shutdown.js'),
        flag,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let output = '';
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (output === 'busy\n') {
        child.kill('SIGTERM');
        // Written after the signal was sent: the child sees it only after its next system call, by which the signal
        // has been caught (and is waiting for the event loop).
        writeFileSync(flag, '');
      }
    });
    try {
      // 0: the orderly stop had begun when the later signal came; 3: the first signal was lost.
      expect(await exited).toBe(0);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);
});
