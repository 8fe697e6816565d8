/**
 * A whole Verity deployment on one machine, owned end to end by the caller: a private Postgres cluster and Redis
 * server on spare loopback ports (so they may be killed and restarted without touching anyone's shared server), the
 * sandbox provider, the API and N dispatchers and M reconcilers, each a separate process running the built app from
 * dist/. Used by the chaos run (which kills things) and the benchmark (which measures things).
 */
import { ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { PrivateService, freePort, startPrivatePostgres, startPrivateRedis } from '../../scripts/local-services';
import { AppName, appNodeArgs } from '../../libs/platform/src/runtime';
import type { WireLog } from '../../apps/sandbox-provider/src/sandbox-provider';
import { HOME_SHARD, shardPrefix } from '../../libs/queues/src/shards';
import { LocalRedisCluster } from '../support/redis-cluster';

export type { AppName };

/** The repository root, from test/chaos (ts-jest) or dist/test/chaos (the built runner). */
export const ROOT = findRoot(__dirname);
export const DIST = path.join(ROOT, 'dist');

function findRoot(from: string): string {
  let dir = from;
  while (dir !== path.dirname(dir)) {
    if (fs.existsSync(path.join(dir, 'package.json')) && fs.existsSync(path.join(dir, 'nest-cli.json'))) return dir;
    dir = path.dirname(dir);
  }
  throw new Error(`cannot find the repository root above ${from}`);
}

/**
 * Short windows, as in test/support/stack.ts TEST_TIMINGS, so faults resolve in seconds rather than minutes. The
 * rate limit is lifted: the harness is one tenant submitting thousands of executions.
 */
export const CLUSTER_TIMINGS: Record<string, string> = {
  CONNECTOR_TIMEOUT_MS: '1000',
  SEND_GRACE_MS: '500',
  SETTLE_WINDOW_MS: '1500',
  READ_BACKOFF_MS: '150',
  READ_BACKOFF_MAX_MS: '600',
  RECONCILE_BUDGET: '6',
  SWEEP_INTERVAL_MS: '500',
  STALE_EXECUTION_MS: '1500',
  DISPATCH_LOCK_MS: '3000',
  RATE_LIMIT_PER_MINUTE: '10000000',
  LOG_LEVEL: 'info',
};

const READY_MARKER: Record<AppName, string> = {
  api: 'api listening',
  dispatcher: 'dispatcher ready',
  reconciler: 'reconciler ready',
  'sandbox-provider': 'sandbox provider listening',
};

/** One app process slot: it can be killed, paused and started again (a new pid in the same slot). */
export class AppProcess {
  child: ChildProcess | null = null;
  /** Set while SIGSTOPped: such a process is alive but must not be picked as a victim again. */
  paused = false;
  /**
   * True from a SIGKILL/SIGTERM the harness sent, or a start that failed (the caller of start() handles that), until
   * the next start: any other exit is a finding.
   */
  exitExpected = false;
  /** Starts refused by the app itself (e.g. Postgres still down at boot). */
  failedStarts = 0;
  /** From spawn until start() returns: an exit meanwhile is a refused start, which start()'s caller handles. */
  private starting = false;
  starts = 0;
  private exited: Promise<void> = Promise.resolve();
  private recent: string[] = [];

  constructor(
    readonly name: AppName,
    readonly index: number,
    private readonly cluster: Cluster,
    private readonly extraEnv: Record<string, string>,
  ) {}

  get label(): string {
    return `${this.name}#${this.index}`;
  }

  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  get alive(): boolean {
    return this.child !== null && this.child.exitCode === null && this.child.signalCode === null;
  }

  get logFile(): string {
    return path.join(this.cluster.dir, 'logs', `${this.name}-${this.index}.log`);
  }

  tail(lines = 30): string {
    return this.recent.join('').split('\n').slice(-lines).join('\n');
  }

  async start(): Promise<void> {
    if (this.alive) return;
    const entry = path.join(DIST, 'apps', this.name, 'src', 'main.js');
    const log = fs.createWriteStream(this.logFile, { flags: 'a' });
    log.write(`\n--- ${new Date().toISOString()} start #${this.starts + 1}\n`);
    // The title replaces the command line in ps and /proc: the processes are easy to tell apart, and a neighbour's
    // `pkill -f dist/apps/api` on a shared machine does not hit them.
    const args = [
      `--title=verity-cluster-${this.name}-${this.index}`,
      ...appNodeArgs(this.name),
      ...this.cluster.nodeArgs,
      entry,
    ];
    const child = spawn(process.execPath, args, {
      env: { ...process.env, ...this.cluster.env, ...this.extraEnv },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child = child;
    if (child.pid) this.cluster.started.push({ pid: child.pid, app: this.name, label: this.label });
    this.starts += 1;
    this.paused = false;
    this.exitExpected = false;
    this.recent = [];
    let seen = '';
    let ready = false;
    const collect = (chunk: Buffer): void => {
      const text = chunk.toString();
      log.write(text);
      this.recent.push(text);
      if (this.recent.length > 200) this.recent.shift();
      if (!ready) {
        seen = (seen + text).slice(-4096);
        if (seen.includes(READY_MARKER[this.name])) ready = true;
      }
    };
    child.stdout?.on('data', collect);
    child.stderr?.on('data', collect);
    this.starting = true;
    this.exited = new Promise<void>((resolve) =>
      child.once('exit', (code, signal) => {
        // Set in the exit event itself, so the unexpected-exit watcher can never see a refused start first.
        if (this.starting) this.exitExpected = true;
        // 'exit' can come before the last output is read: the log is closed on 'close', after the pipes drained.
        child.once('close', () => log.end(`--- exited code=${code} signal=${signal}\n`));
        resolve();
      }),
    );
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
      if (!this.alive) {
        this.exitExpected = true;
        this.starting = false;
        this.failedStarts += 1;
        throw new Error(`${this.label} exited during start:\n${this.tail()}`);
      }
      if (ready && (this.name !== 'api' || (await this.cluster.apiLive()))) {
        this.starting = false;
        return;
      }
      await sleep(50);
    }
    this.failedStarts += 1;
    this.starting = false;
    await this.kill('SIGKILL');
    throw new Error(`${this.label} was not ready in 60 s:\n${this.tail()}`);
  }

  /** SIGKILL/SIGTERM resolve once the process is gone; SIGSTOP/SIGCONT at once. */
  async kill(signal: NodeJS.Signals): Promise<void> {
    if (!this.alive || !this.child) return;
    if (signal === 'SIGKILL' || signal === 'SIGTERM') this.exitExpected = true;
    this.child.kill(signal);
    if (signal === 'SIGSTOP') this.paused = true;
    if (signal === 'SIGCONT') this.paused = false;
    if (signal === 'SIGKILL' || signal === 'SIGTERM') await this.exited;
  }

  async stop(timeoutMs = 10_000): Promise<void> {
    if (!this.alive || !this.child) return;
    this.exitExpected = true;
    this.child.kill('SIGCONT');
    this.child.kill('SIGTERM');
    if (!(await within(this.exited, timeoutMs))) await this.kill('SIGKILL');
  }

  /** Resident memory from /proc (VmRSS), in bytes; null once the process is gone. */
  rssBytes(): number | null {
    const pid = this.pid;
    if (!pid || !this.alive) return null;
    try {
      const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
      const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
      return match ? Number(match[1]) * 1024 : null;
    } catch {
      return null;
    }
  }
}

export interface ClusterOptions {
  /** Working directory for the servers' data and every log; created if missing. Default: a fresh temp dir. */
  dir?: string;
  dispatchers?: number;
  reconcilers?: number;
  /** Timing knobs; default CLUSTER_TIMINGS (short windows). The benchmark passes the production defaults. */
  timings?: Record<string, string>;
  /** Extra environment for every app (overrides the timings). */
  env?: Record<string, string>;
  /** Extra node flags for every app (e.g. --cpu-prof, which NODE_OPTIONS does not allow). */
  nodeArgs?: string[];
  /** Redis append-only file (as docker-compose runs it), so a Redis crash loses at most ~1 s of jobs. */
  redisAppendOnly?: boolean;
  /**
   * Queues on a three-node Redis Cluster (QUEUE_SHARDS=3, REDIS_CLUSTER_NODES) instead of one server. `redis` is then
   * the node serving the home shard (the sweep schedule, shard 0's jobs): a "Redis crash" is that node's crash.
   */
  redisCluster?: boolean;
  postgresSettings?: Record<string, string>;
  /** The apps reach Postgres and Redis through their Unix-domain sockets instead of loopback TCP (one Redis only). */
  unixSockets?: boolean;
  log?: (line: string) => void;
}

/** A private server's Unix socket URL; a cluster asked for sockets fails to start without one, rather than use TCP. */
function socketUrlOf(service: PrivateService): string {
  if (!service.socketUrl) throw new Error(`no Unix socket for the server in ${service.dir}`);
  return service.socketUrl;
}

export class Cluster {
  postgres!: PrivateService;
  redis!: PrivateService;
  /** With `redisCluster`: the whole Redis Cluster (`redis` is one of its nodes). */
  redisCluster: LocalRedisCluster | null = null;
  readonly apps: AppProcess[] = [];
  /** Every process ever started, for matching pids to apps afterwards (CPU profiles are named by pid). */
  readonly started: { pid: number; app: AppName; label: string }[] = [];
  env: Record<string, string> = {};
  apiUrl = '';
  sandboxUrl = '';
  nodeArgs: string[] = [];
  private apiPort = 0;

  private constructor(
    readonly dir: string,
    private readonly log: (line: string) => void,
  ) {}

  static async start(options: ClusterOptions = {}): Promise<Cluster> {
    const dir = options.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'verity-cluster-'));
    fs.mkdirSync(path.join(dir, 'logs'), { recursive: true });
    // As root, Postgres runs as the postgres user, which must be able to traverse this directory (mkdtemp is 0700).
    fs.chmodSync(dir, 0o755);
    const cluster = new Cluster(dir, options.log ?? (() => undefined));
    cluster.nodeArgs = options.nodeArgs ?? [];
    try {
      await cluster.boot(options);
    } catch (error) {
      await cluster.stop();
      throw error;
    }
    return cluster;
  }

  private async boot(options: ClusterOptions): Promise<void> {
    const [pgPort, redisPort, sandboxPort] = [await freePort(), await freePort(), await freePort()];
    this.apiPort = await freePort();
    this.log(`postgres on 127.0.0.1:${pgPort}, redis on 127.0.0.1:${redisPort} (data in ${this.dir})`);
    this.postgres = await startPrivatePostgres({
      dir: path.join(this.dir, 'postgres'),
      port: pgPort,
      settings: { max_connections: '300', ...options.postgresSettings },
    });
    let redisEnv: Record<string, string> = { REDIS_URL: `redis://127.0.0.1:${redisPort}`, QUEUE_PREFIX: '{verity}' };
    if (options.redisCluster) {
      this.redisCluster = await LocalRedisCluster.start({
        dir: path.join(this.dir, 'redis-cluster'),
        appendonly: options.redisAppendOnly ?? true,
      });
      const home = await this.redisCluster.nodeOf(shardPrefix('{verity}', HOME_SHARD, 3));
      this.redis = home.service;
      redisEnv = {
        REDIS_URL: home.service.url,
        REDIS_CLUSTER_NODES: this.redisCluster.nodeList,
        QUEUE_SHARDS: '3',
        QUEUE_PREFIX: '{verity}',
      };
      this.log(`redis cluster ${this.redisCluster.nodeList}; "Redis" crashes hit ${home.host}:${home.port}`);
    } else {
      this.redis = await startPrivateRedis({
        dir: path.join(this.dir, 'redis'),
        port: redisPort,
        appendonly: options.redisAppendOnly ?? true,
        unixSocket: options.unixSockets,
      });
    }
    this.sandboxUrl = `http://127.0.0.1:${sandboxPort}`;
    this.apiUrl = `http://127.0.0.1:${this.apiPort}`;
    this.env = {
      ...(options.timings ?? CLUSTER_TIMINGS),
      NODE_ENV: 'test',
      SEED_DEMO: 'true',
      DATABASE_URL: options.unixSockets ? socketUrlOf(this.postgres) : this.postgres.url,
      ...redisEnv,
      ...(options.unixSockets && !options.redisCluster ? { REDIS_URL: socketUrlOf(this.redis) } : {}),
      SANDBOX_URL: this.sandboxUrl,
      SANDBOX_PORT: String(sandboxPort),
      HOST: '127.0.0.1',
      // Several workers of a kind on one machine: their metrics ports would collide, and nothing here scrapes them.
      DISPATCHER_METRICS_PORT: '0',
      RECONCILER_METRICS_PORT: '0',
      ...options.env,
    };
    await this.migrate();
    await this.add('sandbox-provider').start();
    await this.add('api', { PORT: String(this.apiPort) }).start();
    await this.scaleTo('dispatcher', options.dispatchers ?? 1);
    await this.scaleTo('reconciler', options.reconcilers ?? 1);
  }

  private async migrate(): Promise<void> {
    const entry = path.join(DIST, 'apps', 'api', 'src', 'migrate.js');
    const child = spawn(process.execPath, [entry], {
      env: { ...process.env, ...this.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    fs.writeFileSync(path.join(this.dir, 'logs', 'migrate.log'), output);
    if (code !== 0) throw new Error(`migrations failed (exit ${code}):\n${output}`);
  }

  private add(name: AppName, extraEnv: Record<string, string> = {}): AppProcess {
    const app = new AppProcess(name, this.apps.filter((a) => a.name === name).length, this, extraEnv);
    this.apps.push(app);
    return app;
  }

  /** Starts (or stops, newest first) processes of one app until `count` of them run. */
  async scaleTo(name: 'dispatcher' | 'reconciler', count: number): Promise<void> {
    const slots = this.apps.filter((a) => a.name === name);
    for (let i = 0; i < Math.max(count, slots.length); i += 1) {
      const slot = slots[i] ?? this.add(name);
      if (i < count) await slot.start();
      else await slot.stop();
    }
  }

  app(name: AppName, index = 0): AppProcess {
    const found = this.apps.find((a) => a.name === name && a.index === index);
    if (!found) throw new Error(`no ${name}#${index}`);
    return found;
  }

  of(name: AppName): AppProcess[] {
    return this.apps.filter((a) => a.name === name);
  }

  async apiLive(): Promise<boolean> {
    try {
      const res = await fetch(`${this.apiUrl}/health/live`, { signal: AbortSignal.timeout(2_000) });
      return res.ok;
    } catch {
      return false;
    }
  }

  async sandbox(pathname: string, init?: RequestInit): Promise<Response> {
    return fetch(`${this.sandboxUrl}${pathname}`, init);
  }

  async setFaults(faults: unknown): Promise<void> {
    const res = await this.sandbox('/__faults', {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(faults),
    });
    if (!res.ok) throw new Error(`sandbox refused the faults: ${res.status} ${await res.text()}`);
  }

  async effects(): Promise<SandboxEffects> {
    const res = await this.sandbox('/__effects');
    if (!res.ok) throw new Error(`GET /__effects: ${res.status}`);
    return (await res.json()) as SandboxEffects;
  }

  /** Every request the sandbox received (its wire log). */
  async requests(): Promise<SandboxRequests> {
    const res = await this.sandbox('/__requests');
    if (!res.ok) throw new Error(`GET /__requests: ${res.status}`);
    return (await res.json()) as SandboxRequests;
  }

  /** The status model as the API serves it. */
  async statusModel(): Promise<ServedStatusModel> {
    const res = await fetch(`${this.apiUrl}/v1/status-model`);
    if (!res.ok) throw new Error(`GET /v1/status-model: ${res.status}`);
    return (await res.json()) as ServedStatusModel;
  }

  /**
   * Kills Redis, removes everything it persisted (the append-only files), and starts it again after `downMs`: a
   * Redis that comes back EMPTY, as one without persistence (or with a lost disk) does. Jobs, schedules and the
   * marker key are gone; Postgres still holds every accepted execution.
   */
  async restartRedisEmpty(downMs: number): Promise<void> {
    await this.redis.kill('SIGKILL');
    for (const entry of fs.readdirSync(this.redis.dir)) {
      // A cluster node keeps its nodes.conf (its identity and slots), as a replaced disk's node would be re-added with
      // them: it comes back empty, serving the same slots.
      if (entry === path.basename(this.redis.logFile) || entry === 'nodes.conf') continue;
      fs.rmSync(path.join(this.redis.dir, entry), { recursive: true, force: true });
    }
    await sleep(downMs);
    await this.redis.restart();
  }

  /** Apps first (they drain in-flight work on SIGTERM), then Redis and Postgres. */
  async stop(): Promise<void> {
    await Promise.all(this.apps.map((a) => a.stop().catch(() => undefined)));
    // Their clean-stop signals (Redis SIGTERM, Postgres SIGINT = fast shutdown) with a timer of our own, cleared on
    // exit: PrivateService.stop() leaves its 30 s timer pending, which holds a test process open that long.
    for (const [server, signal] of [
      [this.redis, 'SIGTERM'],
      [this.postgres, 'SIGINT'],
    ] as const) {
      if (!server?.running) continue;
      await server.kill('SIGCONT');
      if (!(await within(server.kill(signal), 30_000))) await server.kill('SIGKILL');
    }
    await this.redisCluster?.stop();
  }

  /** Removes the working directory (servers must be stopped). */
  remove(): void {
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

export interface SandboxEffects {
  total: number;
  /** Effects the provider no longer keeps (its bound was reached): the report is then incomplete. */
  dropped: number;
  charges: Record<string, { count: number; ids: string[]; amounts: number[] }>;
  messages: Record<string, { count: number; ids: string[]; to: string[] }>;
  duplicates: { kind: 'charge' | 'message'; key: string; count: number }[];
}

export type SandboxRequests = WireLog;

/** What the checker reads of GET /v1/status-model (the rest of the document is not compared). */
export interface ServedStatusModel {
  operation: {
    transitions: {
      from: string;
      to: string;
      reasons: string[];
      reason_required: boolean;
      human_only: boolean;
      never_sent_only: boolean;
      sent_only: boolean;
      refused_when_held_for: string[];
      refused_when_acknowledged: boolean;
      refused_when_effect_shown: boolean;
      refused_when_rejected: boolean;
      system_when_held_for: string[];
    }[];
  };
  execution: { transitions: { from: string; to: string[] }[] };
}

/** Whether `promise` settles within `ms`; the timer is cleared either way, so it never holds the process open. */
export async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  try {
    return await Promise.race([promise.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
