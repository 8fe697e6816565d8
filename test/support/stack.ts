import { ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import type { JobProducer } from '@verity/queues';
import IORedis from 'ioredis';
import { dirname, join } from 'node:path';
import {
  clearRedisPrefix,
  closeRedis,
  createTestDatabase,
  TEST_REDIS_URL,
  TestDatabase,
  testQueuePrefix,
} from './services';
import { freePort } from '../../scripts/local-services';
import { AppName, appNodeArgs } from '../../libs/platform/src/runtime';
import { unwatchApi, watchApi } from './openapi-validator';
import { SANDBOX_ACCOUNT_HEADER } from '../../libs/connectors/src/sandbox-account';

/** The repository root, from test/support (ts-jest) or dist/test/support (the built fuzz runner). */
const ROOT = findRoot(__dirname);
/** Where the apps a stack starts keep Node's compile cache (node_modules is not committed). */
export const APP_COMPILE_CACHE = join(ROOT, 'node_modules', '.cache', 'verity-app-compile-cache');

function findRoot(from: string): string {
  for (let dir = from; dir !== dirname(dir); dir = dirname(dir)) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'nest-cli.json'))) return dir;
  }
  throw new Error(`cannot find the repository root above ${from}`);
}
export const DIST = join(ROOT, 'dist');

export type { AppName };

export { freePort };

export interface StackOptions {
  label: string;
  dispatchers?: number;
  reconcilers?: number;
  apis?: number;
  env?: Record<string, string>;
}

export interface QueueLink {
  redis: IORedis;
  producer: JobProducer;
}

export interface RunningApp {
  name: AppName;
  index: number;
  child: ChildProcess;
  output: string[];
  /** Every process warning it printed (`(node:PID) …Warning: …`), kept apart from `output`, which is cut short. */
  warnings: string[];
  exited: Promise<number | null>;
  /** A worker's own /metrics and /health (dispatcher, reconciler): `http://127.0.0.1:<port>`. */
  opsUrl?: string;
}

/** The variable that sets a worker's metrics port. */
const OPS_PORT_VARIABLE: Partial<Record<AppName, string>> = {
  dispatcher: 'DISPATCHER_METRICS_PORT',
  reconciler: 'RECONCILER_METRICS_PORT',
};

/** Fast timings for tests: what production tunes in minutes, tests see in a second or two. */
export const TEST_TIMINGS: Record<string, string> = {
  CONNECTOR_TIMEOUT_MS: '1000',
  SEND_GRACE_MS: '500',
  SETTLE_WINDOW_MS: '1500',
  READ_BACKOFF_MS: '150',
  READ_BACKOFF_MAX_MS: '600',
  RECONCILE_BUDGET: '6',
  PRECONDITION_READ_BUDGET: '6',
  PRECONDITION_READ_BACKOFF_MS: '200',
  PRECONDITION_READ_BACKOFF_MAX_MS: '800',
  SWEEP_INTERVAL_MS: '500',
  STALE_EXECUTION_MS: '1500',
  DISPATCH_LOCK_MS: '3000',
  LOG_LEVEL: 'info',
};

/**
 * The whole system as separate processes (the built apps in dist/), on spare ports, with a database and a Redis
 * key prefix of the test file's own.
 */
export class Stack {
  readonly apps: RunningApp[] = [];
  apiUrl = '';
  apiUrls: string[] = [];
  sandboxUrl = '';
  sandboxPort = 0;
  db!: TestDatabase;
  prefix = '';
  env: Record<string, string> = {};
  private readonly watched: string[] = [];
  private queueLink?: Promise<QueueLink>;
  /** Each app's 'close': its process has exited and its output pipes are closed. */
  private readonly closed = new Map<RunningApp, Promise<unknown>>();

  static async start(options: StackOptions): Promise<Stack> {
    const stack = new Stack();
    try {
      await stack.boot(options);
    } catch (error) {
      await stack.stop();
      throw error;
    }
    return stack;
  }

  private async boot(options: StackOptions): Promise<void> {
    this.db = await createTestDatabase(options.label);
    this.prefix = testQueuePrefix(options.label);
    this.sandboxPort = await freePort();
    this.sandboxUrl = `http://127.0.0.1:${this.sandboxPort}`;
    this.env = {
      ...TEST_TIMINGS,
      NODE_ENV: 'test',
      DATABASE_URL: this.db.url,
      REDIS_URL: TEST_REDIS_URL,
      QUEUE_PREFIX: this.prefix,
      SANDBOX_URL: this.sandboxUrl,
      SANDBOX_PORT: String(this.sandboxPort),
      SEED_DEMO: 'true',
      METRICS_TOKEN,
      ...options.env,
    };
    const { seedDemo } = await import('../../libs/persistence/src/api-keys');
    await seedDemo(this.db.dataSource.manager);
    // Each kind boots beside the others (most of a boot is loading modules, and a test file waited for four in a row);
    // apps of one kind one after another, so their order in `apps` and `apiUrls` is the order they were asked for.
    const inTurn = async (count: number, start: () => Promise<unknown>) => {
      for (let i = 0; i < count; i += 1) await start();
    };
    const booting = [
      inTurn(1, () => this.startApp('sandbox-provider')),
      inTurn(options.apis ?? 1, () => this.startApi()),
      inTurn(options.dispatchers ?? 1, () => this.startApp('dispatcher')),
      inTurn(options.reconcilers ?? 1, () => this.startApp('reconciler')),
    ];
    // Every boot ends, ready or not, before this one answers: a failed start stops whatever did start.
    const booted = await Promise.allSettled(booting);
    const failed = booted.find((b): b is PromiseRejectedResult => b.status === 'rejected');
    if (failed) throw failed.reason;
    this.apiUrl = this.apiUrls[0];
  }

  /** The database's clock now, in ms: what a test compares times stamped by the database (or owed to be) with. */
  async databaseNow(): Promise<number> {
    const [{ now }] = (await this.db.dataSource.query(`SELECT clock_timestamp() AS now`)) as { now: Date }[];
    return now.getTime();
  }

  /**
   * A Redis connection and a job producer on this stack's queues, made on first use and closed by `stop()`. The
   * connection fails fast (no offline queue, one retry): a test's command never waits for a Redis that is not there.
   */
  queues(): Promise<QueueLink> {
    this.queueLink ??= (async () => {
      // Loaded here, not at the top: BullMQ and the queues' library are ~0.15-0.2 s of CPU to load into a test file, and
      // most files that start a stack never ask for its queues.
      const { JobProducer } = await import('@verity/queues');
      const redis = new IORedis(TEST_REDIS_URL, { maxRetriesPerRequest: 1, enableOfflineQueue: false });
      if (redis.status !== 'ready') await once(redis, 'ready');
      return { redis, producer: new JobProducer(redis, this.prefix) };
    })();
    return this.queueLink;
  }

  /** One more API on a spare port, with `extraEnv` over the stack's; its URL is added to `apiUrls` and returned. */
  async startApi(extraEnv: Record<string, string> = {}): Promise<string> {
    return (await this.startApiApp(extraEnv)).url;
  }

  /**
   * As `startApi`: the app as well as its URL (a test that stops it, or reads what it printed). The port was free when
   * chosen, but the API binds it only once its modules are loaded (seconds on a busy machine): another process may take
   * it meanwhile (a test file run by a jest process beside this one draws from the same slice, see freePort). An API
   * that exits for that (EADDRINUSE) is forgotten and another port chosen, a few times; a PORT in `extraEnv` is kept.
   */
  async startApiApp(extraEnv: Record<string, string> = {}): Promise<{ app: RunningApp; url: string }> {
    for (let attempt = 1; ; attempt += 1) {
      const port = await freePort();
      const env = { PORT: String(port), HOST: '127.0.0.1', ...extraEnv };
      try {
        const app = await this.startApp('api', env);
        const url = `http://127.0.0.1:${env.PORT}`;
        this.apiUrls.push(url);
        return { app, url };
      } catch (error) {
        const lost =
          error instanceof AppNotReadyError &&
          error.app.child.exitCode !== null &&
          error.app.output.join('').includes('EADDRINUSE');
        if (!lost || extraEnv.PORT !== undefined || attempt === 3) throw error;
        await this.forget(error.app);
      }
    }
  }

  /** An app that exited before it was ready, no longer one of the stack's (its process and pipes closed first). */
  private async forget(app: RunningApp): Promise<void> {
    await this.closed.get(app);
    this.closed.delete(app);
    this.apps.splice(this.apps.indexOf(app), 1);
  }

  /** `nodeArgs` follow the app's own (appNodeArgs) on node's command line, so a flag given there wins (a bench comparing settings). */
  async startApp(
    name: AppName,
    extraEnv: Record<string, string> = {},
    nodeArgs: readonly string[] = [],
  ): Promise<RunningApp> {
    const entry = join(DIST, 'apps', name, 'src', 'main.js');
    // Each worker on a spare port of its own (several dispatchers may run side by side).
    const opsVariable = OPS_PORT_VARIABLE[name];
    const opsPort = opsVariable ? (extraEnv[opsVariable] ?? String(await freePort())) : undefined;
    const child = spawn(process.execPath, [...appNodeArgs(name), ...nodeArgs, entry], {
      env: {
        ...process.env,
        // Node's own module compile cache (Node 22.1 and later; older ones ignore it): ~150 test files start ~600 app
        // processes that compile the same ~2,100 files of dist/ and node_modules. An entry is found by the file's
        // content, so a rebuilt file is compiled afresh.
        NODE_COMPILE_CACHE: APP_COMPILE_CACHE,
        ...this.env,
        ...(opsVariable ? { [opsVariable]: opsPort } : {}),
        ...extraEnv,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const output: string[] = [];
    const warnings: string[] = [];
    const collect = (chunk: Buffer) => {
      const text = chunk.toString();
      output.push(text);
      if (output.length > 500) output.shift();
      for (const line of text.split('\n')) if (/^\(node:\d+\) \w*Warning:/.test(line)) warnings.push(line);
    };
    child.stdout?.on('data', collect);
    child.stderr?.on('data', collect);
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const closed = new Promise((resolve) => child.on('close', resolve));
    const index = this.apps.filter((a) => a.name === name).length;
    const app: RunningApp = { name, index, child, output, warnings, exited };
    if (opsPort && opsPort !== '0') app.opsUrl = `http://127.0.0.1:${opsPort}`;
    this.apps.push(app);
    this.closed.set(app, closed);
    await waitForReady(app, name === 'api' ? extraEnv.PORT : undefined);
    // Every later response of this API is checked against the document it serves (test/support/openapi-validator.ts).
    if (name === 'api' && extraEnv.PORT) {
      const origin = `http://${extraEnv.HOST ?? '127.0.0.1'}:${extraEnv.PORT}`;
      watchApi(origin);
      this.watched.push(origin);
    }
    return app;
  }

  running(name: AppName): RunningApp[] {
    return this.apps.filter((a) => a.name === name && a.child.exitCode === null && a.child.signalCode === null);
  }

  async kill(app: RunningApp, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    app.child.kill(signal);
    if (signal === 'SIGKILL' || signal === 'SIGTERM') await app.exited;
  }

  async stop(): Promise<void> {
    const link = await this.queueLink?.catch(() => undefined);
    await link?.producer.close().catch(() => undefined);
    if (link) await closeRedis(link.redis);
    const stopping = this.apps.filter((app) => app.child.exitCode === null && app.child.signalCode === null);
    for (const app of stopping) {
      app.child.kill('SIGCONT');
      app.child.kill('SIGTERM');
    }
    // Every app's process and its output pipes closed before the next step: one killed without waiting for it left
    // its handles open in the test file after stop().
    await Promise.all(
      this.apps.map(async (app) => {
        let timer: NodeJS.Timeout | undefined;
        const inTime = await Promise.race([
          app.exited.then(() => true),
          new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), 10_000))),
        ]);
        clearTimeout(timer);
        if (!inTime) app.child.kill('SIGKILL');
        await this.closed.get(app);
      }),
    );
    for (const origin of this.watched) unwatchApi(origin);
    await this.db?.drop().catch(() => undefined);
    await clearRedisPrefix(this.prefix).catch(() => undefined);
  }

  /** The process warnings every app printed, each prefixed with the app's name. */
  warnings(): string[] {
    return this.apps.flatMap((a) => a.warnings.map((w) => `${a.name}#${a.index}: ${w}`));
  }

  logs(name?: AppName): string {
    return this.apps
      .filter((a) => !name || a.name === name)
      .map((a) => `--- ${a.name}#${a.index}\n${a.output.join('')}`)
      .join('\n');
  }

  async sandbox(path: string, init?: RequestInit): Promise<Response> {
    return fetch(`${this.sandboxUrl}${path}`, init);
  }

  async setFaults(faults: unknown): Promise<void> {
    const res = await this.sandbox('/__faults', {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(faults),
    });
    if (!res.ok) throw new Error(`faults refused: ${res.status} ${await res.text()}`);
  }

  /**
   * Waits until `count` whole sweeps have run from start to finish after this call: how a test proves that something
   * did NOT happen (a re-send, a second escalation, a read) — the sweep that would have done it ran, and did not.
   */
  async sweepsPassed(count = 2, timeoutMs = 30_000): Promise<void> {
    const [{ now }] = (await this.db.dataSource.query(`SELECT now()`)) as { now: Date }[];
    await waitFor(
      async () =>
        (
          (await this.db.dataSource.query(
            `SELECT count(*)::int AS n FROM sweep_log WHERE started_at > $1 AND finished_at IS NOT NULL`,
            [now],
          )) as { n: number }[]
        )[0].n,
      (n) => n >= count,
      timeoutMs,
      100,
    );
  }

  async effects(): Promise<{
    total: number;
    dropped: number;
    charges: Record<string, { count: number; ids: string[]; amounts: number[] }>;
    messages: Record<string, { count: number; ids: string[] }>;
    duplicates: { kind: string; key: string; count: number }[];
  }> {
    return (await this.sandbox('/__effects')).json() as never;
  }
}

/** An app that exited, or did not say it was ready in time (`app`: what it printed). */
class AppNotReadyError extends Error {
  constructor(
    readonly app: RunningApp,
    message: string,
  ) {
    super(message);
  }
}

async function waitForReady(app: RunningApp, apiPort?: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  const marker = {
    api: 'api listening',
    dispatcher: 'dispatcher ready',
    reconciler: 'reconciler ready',
    'sandbox-provider': 'sandbox provider listening',
  }[app.name];
  while (Date.now() < deadline) {
    if (app.child.exitCode !== null)
      throw new AppNotReadyError(app, `${app.name} exited early:\n${app.output.join('')}`);
    if (app.output.join('').includes(marker)) {
      if (apiPort) {
        const ok = await fetch(`http://127.0.0.1:${apiPort}/health/live`).then(
          (r) => r.ok,
          () => false,
        );
        if (ok) return;
      } else return;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new AppNotReadyError(app, `${app.name} did not become ready:\n${app.output.join('')}`);
}

/**
 * The demo tenant's account at the sandbox provider (its `sandbox-account` header): a charge a test makes directly, as
 * "someone else" in the same merchant account, must carry it to be seen by the tenant's reads.
 */
export const DEMO_SANDBOX_ACCOUNT = { [SANDBOX_ACCOUNT_HEADER]: 'demo' };

export const DEMO = {
  agent: 'demo-agent-key',
  reviewer: 'demo-reviewer-key',
  admin: 'demo-admin-key',
  otherAgent: 'demo-other-agent-key',
  /** The platform operator (no tenant): Bull Board and /metrics. */
  operator: 'demo-operator-key',
};

/** What the test stacks' Prometheus would send as its bearer_token (/metrics is closed otherwise). */
export const METRICS_TOKEN = 'test-metrics-token-0123456789';

export async function waitFor<T>(
  probe: () => Promise<T>,
  until: (value: T) => boolean,
  timeoutMs = 20_000,
  intervalMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: T = await probe();
  while (!until(last)) {
    if (Date.now() > deadline)
      throw new Error(`condition not met in ${timeoutMs} ms; last value: ${JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, intervalMs));
    last = await probe();
  }
  return last;
}
