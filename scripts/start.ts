/**
 * `npm start`: everything on one machine. Finds (or starts) Postgres and Redis, runs the migrations once, then runs
 * the api, dispatcher, reconciler and sandbox provider as child processes with prefixed output, restarts any of them
 * that dies unasked (with backoff), and stops them all on Ctrl-C. Runs from the build output (dist/scripts/start.js).
 */
import { ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as readline from 'node:readline';
import { Client } from 'pg';
import { readSandboxSettings } from '../apps/sandbox-provider/src/settings';
import { ConfigError, loadConfig } from '../libs/platform/src/config';
import { appNodeArgs, type AppName } from '../libs/platform/src/runtime';
import { humanLine, wantsHumanLogs } from './log-format';
import {
  findBinaries,
  isPortOpen,
  LocalServiceError,
  MissingBinariesError,
  PrivateService,
  redisMaxmemoryPolicy,
  redisPing,
  startPrivatePostgres,
  startPrivateRedis,
} from './local-services';

const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/verity';
const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';
/**
 * How long an app may take to stop after SIGTERM before it is killed: its own grace (SHUTDOWN_GRACE_MS, 25 s unless
 * set; the app refuses a value out of range) and 5 s more, so the app's own bound — which waits for a send or a webhook
 * call under way and records it — always comes first. 10 s cut a delivery that may take WEBHOOK_TIMEOUT_MS (10 s).
 */
const CHILD_STOP_TIMEOUT_MS = (Number(process.env.SHUTDOWN_GRACE_MS) || 25_000) + 5_000;
/** Waits before restarting a crashed app: doubling per crash in a row, from the first to the cap. */
const RESTART_BACKOFF_FIRST_MS = 1_000;
const RESTART_BACKOFF_MAX_MS = 30_000;
/** An app that ran this long before crashing starts again from the first wait: it was not crash-looping. */
const RESTART_STABLE_AFTER_MS = 60_000;

const color = process.stdout.isTTY && !process.env.NO_COLOR;
const paint = (code: number, text: string): string => (color ? `\x1b[${code}m${text}\x1b[0m` : text);
const bold = (text: string): string => paint(1, text);

function say(message: string): void {
  for (const line of message.split('\n')) process.stdout.write(`${paint(35, '[verity]')} ${line}\n`);
}

function complain(message: string): void {
  for (const line of message.split('\n')) process.stderr.write(`${paint(31, '[verity]')} ${line}\n`);
}

class StartupError extends Error {
  override readonly name = 'StartupError';
}

function findRepoRoot(): string {
  // dist/scripts/start.js → the checkout root is the nearest ancestor with package.json.
  let dir = __dirname;
  for (;;) {
    if (fs.existsSync(path.join(dir, 'package.json'))) return dir;
    const parent = path.dirname(dir);
    if (parent === dir) return process.cwd();
    dir = parent;
  }
}

function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return url;
  }
}

function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

function pgErrorCode(error: unknown): string | undefined {
  return typeof error === 'object' && error !== null && 'code' in error ? String(error.code) : undefined;
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

async function tryConnect(url: string): Promise<void> {
  const client = new Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.query('SELECT 1');
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Connects to the server's `postgres` database and creates the target database if it is missing. */
async function ensureDatabase(url: string): Promise<boolean> {
  const database = decodeURIComponent(new URL(url).pathname.replace(/^\//, ''));
  if (!database) return false;
  const admin = new Client({ connectionString: withDatabase(url, 'postgres'), connectionTimeoutMillis: 5_000 });
  admin.on('error', () => undefined);
  try {
    await admin.connect();
    const found = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
    if (found.rowCount) return false;
    await admin.query(`CREATE DATABASE "${database.replace(/"/g, '""')}"`);
    return true;
  } catch (error) {
    if (pgErrorCode(error) === '42P04') return false; // created by someone else meanwhile
    throw error;
  } finally {
    await admin.end().catch(() => undefined);
  }
}

function postgresAdvice(url: string, error: unknown): string {
  const code = pgErrorCode(error);
  const where = redact(url);
  if (code === '28P01' || code === '28000') {
    return (
      `Postgres at ${where} rejected the login (${errorText(error)}).\n` +
      'Set DATABASE_URL with the right user and password, e.g. DATABASE_URL=postgres://user:password@host:5432/verity'
    );
  }
  return (
    `Postgres is not reachable at ${where} (${errorText(error) || code || 'connection failed'}).\n` +
    'Start it, for example:\n' +
    '  docker compose up -d postgres\n' +
    '  or: apt-get install -y postgresql && pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start\n' +
    'or unset DATABASE_URL to let `npm start` run a private Postgres under .verity/pg.'
  );
}

function redisAdvice(url: string): string {
  return (
    `Redis is not reachable at ${redact(url)}.\n` +
    'Start it, for example:\n' +
    '  docker compose up -d redis\n' +
    '  or: apt-get install -y redis-server && redis-server --daemonize yes --bind 127.0.0.1 --maxmemory-policy noeviction\n' +
    'or unset REDIS_URL to let `npm start` run a private Redis under .verity/redis.'
  );
}

interface Service {
  url: string;
  description: string;
  private: PrivateService | null;
}

async function resolvePostgres(stateDir: string, privates: PrivateService[]): Promise<Service> {
  const configured = process.env.DATABASE_URL;
  if (configured) {
    try {
      await tryConnect(configured);
    } catch (error) {
      // A server that answers but lacks the database: create it, as for the default server.
      if (pgErrorCode(error) !== '3D000') throw new StartupError(postgresAdvice(configured, error));
      try {
        await ensureDatabase(configured);
        say(`created database ${new URL(configured).pathname.slice(1)} on ${redact(configured)}`);
      } catch (createError) {
        throw new StartupError(postgresAdvice(configured, createError));
      }
    }
    return { url: configured, description: `${redact(configured)} (DATABASE_URL)`, private: null };
  }
  if (await isPortOpen('127.0.0.1', 5432)) {
    try {
      if (await ensureDatabase(DEFAULT_DATABASE_URL)) say('created database verity on the Postgres at 127.0.0.1:5432');
      await tryConnect(DEFAULT_DATABASE_URL);
    } catch (error) {
      throw new StartupError(
        `${postgresAdvice(DEFAULT_DATABASE_URL, error)}\n` +
          '(Something answers on 127.0.0.1:5432, so no private Postgres was started; set DATABASE_URL to use it.)',
      );
    }
    return { url: DEFAULT_DATABASE_URL, description: `${DEFAULT_DATABASE_URL} (already running)`, private: null };
  }
  const dir = path.join(stateDir, 'pg');
  say(`nothing answers on 127.0.0.1:5432: starting a private Postgres in ${dir} ...`);
  const pg = await startPrivatePostgres({ dir, port: 5432 });
  privates.push(pg);
  return { url: pg.url, description: `${pg.url} (private, data in ${dir})`, private: pg };
}

async function resolveRedis(stateDir: string, privates: PrivateService[]): Promise<Service> {
  const configured = process.env.REDIS_URL;
  let service: Service;
  if (configured) {
    if (!(await redisPing(configured, 3_000))) throw new StartupError(redisAdvice(configured));
    service = { url: configured, description: `${redact(configured)} (REDIS_URL)`, private: null };
  } else if (await isPortOpen('127.0.0.1', 6379)) {
    if (!(await redisPing(DEFAULT_REDIS_URL, 3_000))) {
      throw new StartupError(
        `${redisAdvice(DEFAULT_REDIS_URL)}\n(Something answers on 127.0.0.1:6379 but not as Redis without a password; ` +
          'set REDIS_URL to use it.)',
      );
    }
    service = { url: DEFAULT_REDIS_URL, description: `${DEFAULT_REDIS_URL} (already running)`, private: null };
  } else {
    const dir = path.join(stateDir, 'redis');
    say(`nothing answers on 127.0.0.1:6379: starting a private Redis in ${dir} ...`);
    const redis = await startPrivateRedis({ dir, port: 6379, appendonly: true });
    privates.push(redis);
    service = { url: redis.url, description: `${redis.url} (private, data in ${dir})`, private: redis };
  }
  const policy = await redisMaxmemoryPolicy(service.url).catch(() => null);
  if (policy === null) {
    say(`could not read maxmemory-policy from ${redact(service.url)} (CONFIG not allowed?); the apps will check it`);
  } else if (policy !== 'noeviction') {
    throw new StartupError(
      `Redis at ${redact(service.url)} has maxmemory-policy "${policy}"; Verity requires "noeviction" ` +
        '(an evicting Redis silently loses queued jobs), and every app refuses to start without it. Fix:\n' +
        `  redis-cli -u ${redact(service.url)} config set maxmemory-policy noeviction\n` +
        '(and set `maxmemory-policy noeviction` in redis.conf so it survives a restart)',
    );
  }
  return service;
}

/**
 * A port setting, by the rule the apps read their own with: decimal digits only. `Number()` also took `0x10`, `1e3`,
 * ` 80` and `+80`, so the port checked here was not the one written (the app then refused it, or used another).
 */
function parsePort(name: string, fallback: number): number {
  const raw = process.env[name];
  // Blank is unset, as the apps read it; leading zeros are digits too.
  if (raw === undefined || raw.trim() === '') return fallback;
  const port = /^[0-9]+$/.test(raw) ? Number(raw) : NaN;
  if (!(port >= 1 && port <= 65535)) throw new StartupError(`${name} is not a port: ${raw}`);
  return port;
}

// ---------------------------------------------------------------------------------------------------------------
// Child processes

interface AppSpec {
  name: string;
  /** The app whose node flags it runs with (appNodeArgs): the migration step is the API's. */
  app: AppName;
  entry: string;
  color: number;
}

interface RunningApp {
  spec: AppSpec;
  child: ChildProcess;
  startedAt: number;
  /** Resolves with a description of how the process ended, e.g. "exit code 1" or "signal SIGKILL". */
  exited: Promise<string>;
  exitCode: number | null;
  done: boolean;
}

const PREFIX_WIDTH = 'sandbox-provider'.length;

const humanLogs = wantsHumanLogs(Boolean(process.stdout.isTTY), process.env);

function pipeLines(stream: NodeJS.ReadableStream | null, out: NodeJS.WriteStream, prefix: string): void {
  if (!stream) return;
  const lines = readline.createInterface({ input: stream, crlfDelay: Infinity });
  lines.on('line', (line) => out.write(`${prefix} ${humanLogs ? humanLine(line) : line}\n`));
}

function launch(spec: AppSpec, env: NodeJS.ProcessEnv): RunningApp {
  const child = spawn(process.execPath, [...appNodeArgs(spec.app), spec.entry], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
    // Own process group: a Ctrl-C in the terminal reaches only this script, which stops the apps first and the
    // databases last, instead of everything at once.
    detached: true,
  });
  const prefix = paint(spec.color, `[${spec.name}]`.padEnd(PREFIX_WIDTH + 2));
  pipeLines(child.stdout, process.stdout, prefix);
  pipeLines(child.stderr, process.stderr, prefix);
  const app: RunningApp = {
    spec,
    child,
    startedAt: Date.now(),
    done: false,
    exitCode: null,
    exited: new Promise((resolve) => {
      child.once('error', (error) => {
        app.done = true;
        resolve(`could not be started: ${error.message}`);
      });
      child.once('exit', (code, signal) => {
        app.done = true;
        app.exitCode = code;
        resolve(signal ? `signal ${signal}` : `exit code ${code}`);
      });
    }),
  };
  return app;
}

async function stopApp(app: RunningApp): Promise<void> {
  if (app.done || !app.child.pid) return;
  try {
    process.kill(app.child.pid, 'SIGTERM');
  } catch {
    return;
  }
  const timer = new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), CHILD_STOP_TIMEOUT_MS));
  if ((await Promise.race([app.exited, timer])) === 'timeout' && !app.done) {
    complain(`${app.spec.name} did not stop within ${CHILD_STOP_TIMEOUT_MS / 1000} s: killing it`);
    try {
      process.kill(-app.child.pid, 'SIGKILL');
    } catch {
      // already gone
    }
    await app.exited;
  }
}

/** The wait before restarting an app after its `crashes`-th crash in a row: 1 s, 2 s, 4 s … capped at 30 s. */
function restartDelayMs(crashes: number): number {
  return Math.min(RESTART_BACKOFF_MAX_MS, RESTART_BACKOFF_FIRST_MS * 2 ** Math.max(0, crashes - 1));
}

/**
 * Keeps one app running: when it exits without being asked to, it is started again after a backoff, and every other
 * app (the sandbox provider and its record of effects among them) carries on. Only `stop()` ends it for good.
 */
class Supervised {
  current: RunningApp;
  private crashes = 0;
  private restartTimer: NodeJS.Timeout | null = null;
  private stopping = false;

  constructor(
    readonly spec: AppSpec,
    private readonly env: NodeJS.ProcessEnv,
  ) {
    this.current = this.start();
  }

  private start(): RunningApp {
    const app = launch(this.spec, this.env);
    if (app.child.pid) say(`started ${this.spec.name} (pid ${app.child.pid})`);
    void app.exited.then((how) => this.onExit(app, how));
    return app;
  }

  private onExit(app: RunningApp, how: string): void {
    if (this.stopping || app !== this.current) return;
    const ranMs = Date.now() - app.startedAt;
    this.crashes = ranMs >= RESTART_STABLE_AFTER_MS ? 1 : this.crashes + 1;
    const delay = restartDelayMs(this.crashes);
    const inARow = this.crashes > 1 ? ` (crash ${this.crashes} in a row: backing off)` : '';
    complain(`${this.spec.name} stopped unexpectedly (${how}); restarting it in ${delay / 1000} s${inARow}`);
    this.restartTimer = setTimeout(() => {
      this.restartTimer = null;
      if (this.stopping) return;
      this.current = this.start();
      say(`${this.spec.name} restarted (pid ${this.current.child.pid ?? 'none'}); the other apps kept running`);
    }, delay);
  }

  /** No more restarts; SIGTERM (then SIGKILL) the process if it runs. */
  async stop(): Promise<void> {
    this.stopping = true;
    if (this.restartTimer) clearTimeout(this.restartTimer);
    this.restartTimer = null;
    await stopApp(this.current);
  }

  get alive(): boolean {
    return !this.current.done || this.restartTimer !== null;
  }
}

async function waitForPort(port: number, timeoutMs: number, stillUseful: () => boolean): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline && stillUseful()) {
    if (await isPortOpen('127.0.0.1', port, 500)) return true;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return false;
}

function banner(apiPort: number, sandboxPort: number, postgres: Service, redis: Service, demo: boolean): string {
  const api = `http://localhost:${apiPort}`;
  const rows: Array<[string, string]> = [
    ['API', api],
    ['API docs', `${api}/docs`],
    ['Review console', `${api}/console`],
    ['Bull Board', `${api}/admin/queues   (operator key; read-only)`],
    ['Metrics', `${api}/metrics   (operator key or METRICS_TOKEN)`],
    ['Sandbox provider', `http://localhost:${sandboxPort}`],
    ['Postgres', postgres.description],
    ['Redis', redis.description],
  ];
  const lines = [bold('Verity is running'), ...rows.map(([k, v]) => `  ${k.padEnd(18)}${v}`)];
  if (!process.env.HOST || process.env.HOST === '127.0.0.1') {
    lines.push('The API listens on 127.0.0.1 only; set HOST=0.0.0.0 to expose it (then not with the demo keys).');
  }
  if (!demo) {
    lines.push(
      'NODE_ENV=production: no demo tenant or demo keys are seeded; create keys with `npm run keys`',
      '(`--new-tenant` with the first key of a tenant).',
    );
  } else {
    lines.push(
      bold('Demo API keys') +
        ' (Authorization: Bearer <key>): DEMO KEYS, published in the README — for this local demo only',
      '  tenant demo        agent     demo-agent-key',
      '                     reviewer  demo-reviewer-key',
      '                     admin     demo-admin-key',
      '  tenant demo-other  agent     demo-other-agent-key',
      '  platform           operator  demo-operator-key   (Bull Board, /metrics; no tenant data)',
    );
  }
  lines.push('An app that crashes is restarted (1 s, 2 s, 4 s … up to 30 s apart). Press Ctrl-C to stop.');
  return lines.join('\n');
}

async function main(): Promise<void> {
  const root = findRepoRoot();
  const dist = path.join(root, 'dist');
  const entry = (app: AppName, file = 'main.js'): string => path.join(dist, 'apps', app, 'src', file);
  const apps: AppSpec[] = [
    { name: 'sandbox-provider', app: 'sandbox-provider', entry: entry('sandbox-provider'), color: 36 },
    { name: 'api', app: 'api', entry: entry('api'), color: 32 },
    { name: 'dispatcher', app: 'dispatcher', entry: entry('dispatcher'), color: 33 },
    { name: 'reconciler', app: 'reconciler', entry: entry('reconciler'), color: 34 },
  ];
  const migrate: AppSpec = { name: 'migrate', app: 'api', entry: entry('api', 'migrate.js'), color: 90 };
  const missing = [migrate, ...apps].filter((app) => !fs.existsSync(app.entry)).map((app) => app.entry);
  if (missing.length) {
    complain(`not built yet (missing ${missing.map((m) => path.relative(root, m)).join(', ')}): run npm run build`);
    process.exit(1);
  }

  const privates: PrivateService[] = [];
  const running: Supervised[] = [];
  let migration: RunningApp | null = null;
  let shuttingDown: Promise<never> | null = null;

  const shutdown = (code: number, reason: string): Promise<never> => {
    if (shuttingDown) return shuttingDown;
    shuttingDown = (async () => {
      say(reason);
      const apps = running.filter((app) => app.alive);
      const children = [...apps.map((app) => app.spec.name), ...(migration && !migration.done ? ['migrate'] : [])];
      if (children.length) say(`stopping ${children.join(', ')} ...`);
      await Promise.all([...running.map((app) => app.stop()), ...(migration ? [stopApp(migration)] : [])]);
      // The databases go last: the apps need them to finish in-flight work and close cleanly.
      if (privates.length) say('stopping the private Postgres/Redis ...');
      await Promise.all(privates.map((service) => service.stop()));
      if (children.length || privates.length) say('stopped');
      process.exit(code);
    })();
    return shuttingDown;
  };
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(signal, () => {
      // npm forwards the terminal's SIGINT too, so one Ctrl-C can arrive twice: repeats are not an escalation.
      if (shuttingDown) return;
      void shutdown(0, `${signal} received`);
    });
  }

  // The local demo is the only place the published demo keys exist; never with NODE_ENV=production.
  const demo = process.env.NODE_ENV !== 'production';

  try {
    const stateDir = path.join(root, '.verity');
    const apiPort = parsePort('PORT', 3000);
    const sandboxPort = parsePort('SANDBOX_PORT', 4010);
    // The workers' /metrics and /health ports (0 turns one off: nothing to check).
    const workerPorts = (
      [
        ['dispatcher metrics', 'DISPATCHER_METRICS_PORT', 9101],
        ['reconciler metrics', 'RECONCILER_METRICS_PORT', 9102],
      ] as const
    )
      .filter(([, variable]) => process.env[variable] !== '0')
      .map(([name, variable, fallback]) => [name, parsePort(variable, fallback), variable] as const);
    // The apps' settings, read by their own rules, before anything is started: a refused value (an empty
    // DATABASE_URL, a CONNECTOR_TIMEOUT_MS of `abc`, a SANDBOX_MAX_EFFECTS of -1) is named here once, instead of
    // being taken for unset (the default database) or an app being restarted in a loop that a restart cannot end.
    loadConfig({ ...process.env, SEED_DEMO: demo ? 'true' : 'false' });
    readSandboxSettings();
    for (const [name, port, variable] of [
      ['api', apiPort, 'PORT'],
      ['sandbox provider', sandboxPort, 'SANDBOX_PORT'],
      ...workerPorts,
    ] as const) {
      if (await isPortOpen('127.0.0.1', port)) {
        throw new StartupError(
          `port ${port} (${name}) is already in use: is another \`npm start\` running? Stop it, or set ${variable}.`,
        );
      }
    }

    // Say everything that is missing at once, before starting anything.
    const needs: string[] = [];
    if (!process.env.DATABASE_URL && !(await isPortOpen('127.0.0.1', 5432))) needs.push('postgres');
    if (!process.env.REDIS_URL && !(await isPortOpen('127.0.0.1', 6379))) needs.push('redis');
    if (needs.length) {
      const binaries = findBinaries();
      const missing = [
        ...(needs.includes('postgres') && !binaries.postgres
          ? ['the PostgreSQL server binaries (initdb, pg_ctl, postgres)']
          : []),
        ...(needs.includes('redis') && !binaries.redisServer ? ['redis-server'] : []),
      ];
      if (missing.length) throw new MissingBinariesError(missing);
    }
    const postgres = await resolvePostgres(stateDir, privates);
    say(`Postgres: ${postgres.description}`);
    const redis = await resolveRedis(stateDir, privates);
    say(`Redis:    ${redis.description}`);

    const env: NodeJS.ProcessEnv = {
      ...process.env,
      SEED_DEMO: demo ? 'true' : 'false',
      DATABASE_URL: postgres.url,
      REDIS_URL: redis.url,
      PORT: String(apiPort),
      SANDBOX_PORT: String(sandboxPort),
      SANDBOX_URL: process.env.SANDBOX_URL || `http://127.0.0.1:${sandboxPort}`,
    };

    if (shuttingDown) return;
    say('running migrations ...');
    migration = launch(migrate, env);
    const migrationEnd = await migration.exited;
    if (shuttingDown) return;
    if (migration.exitCode !== 0) {
      await shutdown(1, `migrations failed (${migrationEnd}); see the [migrate] lines above`);
      return;
    }

    for (const spec of apps) running.push(new Supervised(spec, env));

    if (await waitForPort(apiPort, 60_000, () => !shuttingDown)) {
      say(banner(apiPort, sandboxPort, postgres, redis, demo));
    } else if (!shuttingDown) {
      complain(`the api is not listening on port ${apiPort} after 60 s; see the [api] lines above`);
    }
  } catch (error) {
    const known =
      error instanceof StartupError ||
      error instanceof MissingBinariesError ||
      error instanceof LocalServiceError ||
      error instanceof ConfigError;
    complain(known ? error.message : errorText(error));
    await shutdown(1, 'startup failed');
  }
}

main().catch((error: unknown) => {
  complain(`unexpected failure: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  process.exit(1);
});
