import type { ChildProcess } from 'node:child_process';
import { clearRedisPrefix, createTestDatabase, TEST_REDIS_URL, type TestDatabase, testQueuePrefix } from './services';
import { TEST_TIMINGS, freePort, waitFor } from './stack';

/** Whether the process `pid` is still there. */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * `npm start` (scripts/start.js, which starts and supervises every app) run by a test against the test Postgres and
 * Redis, with a database, a Redis key prefix and spare ports of its own. How it is run (the compiled script, or a real
 * npm) is the test's; stopping it is too, before `drop`.
 */
export class NpmStartRun {
  child: ChildProcess | null = null;
  /** Everything it wrote, stdout and stderr. */
  output = '';
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }> = new Promise(() => undefined);
  /** PORT, SANDBOX_PORT, DISPATCHER_METRICS_PORT and RECONCILER_METRICS_PORT, in that order. */
  readonly ports: number[] = [];
  private db: TestDatabase | undefined;
  private prefix = '';

  constructor(private readonly label: string) {}

  /** The API's base URL. */
  get apiUrl(): string {
    return `http://127.0.0.1:${this.ports[0]}`;
  }

  /** Every `started <app> (pid N)` line so far, in order. */
  started(): { app: string; pid: number }[] {
    return [...this.output.matchAll(/started (\S+) \(pid (\d+)\)/g)].map((m) => ({ app: m[1], pid: Number(m[2]) }));
  }

  /** Whether it is still running. */
  running(): boolean {
    return this.child !== null && this.child.exitCode === null && this.child.signalCode === null;
  }

  /**
   * Makes its database, prefix and ports, starts it with `spawnStart` (given the environment that points the apps at
   * them), and waits until it says that Verity is running; throws, with what it wrote, if it exits first.
   */
  async start(spawnStart: (env: NodeJS.ProcessEnv) => ChildProcess): Promise<void> {
    this.db = await createTestDatabase(this.label);
    this.prefix = testQueuePrefix(this.label);
    for (let i = 0; i < 4; i++) this.ports.push(await freePort());
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      ...TEST_TIMINGS,
      NODE_ENV: 'test',
      NO_COLOR: '1',
      DATABASE_URL: this.db.url,
      REDIS_URL: TEST_REDIS_URL,
      QUEUE_PREFIX: this.prefix,
      PORT: String(this.ports[0]),
      SANDBOX_PORT: String(this.ports[1]),
      DISPATCHER_METRICS_PORT: String(this.ports[2]),
      RECONCILER_METRICS_PORT: String(this.ports[3]),
    };
    delete env.SANDBOX_URL;
    const child = spawnStart(env);
    this.child = child;
    child.stdout?.on('data', (chunk: Buffer) => (this.output += chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => (this.output += chunk.toString()));
    this.exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
    await waitFor(
      async () => this.output,
      (text) => text.includes('Verity is running') || child.exitCode !== null,
      90_000,
      100,
    );
    if (!this.output.includes('Verity is running')) throw new Error(`npm start did not come up:\n${this.output}`);
  }

  /** Drops its database and its Redis keys (none before `start` made a prefix: an empty one would match every key). */
  async drop(): Promise<void> {
    await this.db?.drop().catch(() => undefined);
    if (this.prefix) await clearRedisPrefix(this.prefix).catch(() => undefined);
  }
}
