/**
 * Disposable Postgres and Redis servers from locally installed binaries: `npm start` uses them when nothing runs on
 * the default ports, and the chaos harness uses them to kill, pause and restart "the database" or "Redis" without
 * touching a shared server. Node built-ins only, so this file runs before anything else is known to work.
 */
import { ChildProcess, spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import * as tls from 'node:tls';

/** Where to get the servers when they are not installed: the same text for `npm start` and the chaos harness. */
export const HOW_TO_GET_SERVICES = [
  'Either run them in containers:    docker compose up -d postgres redis',
  'or install the OS packages:       apt-get install -y postgresql redis-server   (Debian/Ubuntu)',
  '                                  brew install postgresql@16 redis               (macOS)',
  'or point Verity at existing servers with DATABASE_URL and REDIS_URL.',
].join('\n');

export class MissingBinariesError extends Error {
  override readonly name = 'MissingBinariesError';
  constructor(readonly missing: string[]) {
    super(`cannot find ${missing.join(', ')} on this machine.\n${HOW_TO_GET_SERVICES}`);
  }
}

export class LocalServiceError extends Error {
  override readonly name = 'LocalServiceError';
}

export interface PostgresBinaries {
  binDir: string;
  initdb: string;
  pgCtl: string;
  postgres: string;
  /** Major version reported by `postgres --version`, or null when it could not be read. */
  majorVersion: number | null;
}

export interface LocalBinaries {
  postgres: PostgresBinaries | null;
  redisServer: string | null;
  /** Human-readable names of what was not found (empty when everything is there). */
  missing: string[];
}

function isExecutable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

function onPath(name: string): string | null {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (dir && isExecutable(path.join(dir, name))) return path.join(dir, name);
  }
  return null;
}

function versionDirs(parent: string, pattern: RegExp): string[] {
  try {
    return fs
      .readdirSync(parent)
      .filter((name) => pattern.test(name))
      .sort((a, b) => Number(b.replace(/\D+/g, '')) - Number(a.replace(/\D+/g, '')))
      .map((name) => path.join(parent, name, 'bin'));
  } catch {
    return [];
  }
}

function postgresBinDirs(): string[] {
  const dirs: string[] = [];
  if (process.env.PG_BIN_DIR) dirs.push(process.env.PG_BIN_DIR);
  // Debian/Ubuntu keep the server binaries out of PATH, one directory per major version: prefer the newest.
  dirs.push(...versionDirs('/usr/lib/postgresql', /^\d+$/));
  dirs.push(...versionDirs('/usr', /^pgsql-\d+$/)); // RHEL/Fedora PGDG packages
  dirs.push(...versionDirs('/opt/homebrew/opt', /^postgresql(@\d+)?$/));
  dirs.push(...versionDirs('/usr/local/opt', /^postgresql(@\d+)?$/));
  dirs.push('/usr/local/pgsql/bin');
  const initdbOnPath = onPath('initdb');
  if (initdbOnPath) dirs.push(path.dirname(initdbOnPath));
  return dirs;
}

function postgresMajorVersion(postgresBinary: string): number | null {
  const result = spawnSync(postgresBinary, ['--version'], { encoding: 'utf8', timeout: 10_000 });
  const match = /(\d+)(?:\.\d+)?/.exec(result.stdout ?? '');
  return match ? Number(match[1]) : null;
}

/** Locates initdb/pg_ctl/postgres (one installation, newest first) and redis-server. Never throws. */
export function findBinaries(): LocalBinaries {
  let postgres: PostgresBinaries | null = null;
  for (const binDir of postgresBinDirs()) {
    const candidate = {
      binDir,
      initdb: path.join(binDir, 'initdb'),
      pgCtl: path.join(binDir, 'pg_ctl'),
      postgres: path.join(binDir, 'postgres'),
    };
    if (isExecutable(candidate.initdb) && isExecutable(candidate.pgCtl) && isExecutable(candidate.postgres)) {
      postgres = { ...candidate, majorVersion: postgresMajorVersion(candidate.postgres) };
      break;
    }
  }
  const redisServer =
    (process.env.REDIS_SERVER_BIN && isExecutable(process.env.REDIS_SERVER_BIN)
      ? process.env.REDIS_SERVER_BIN
      : null) ??
    onPath('redis-server') ??
    ['/usr/bin/redis-server', '/usr/local/bin/redis-server', '/opt/homebrew/bin/redis-server'].find(isExecutable) ??
    null;
  const missing: string[] = [];
  if (!postgres) missing.push('the PostgreSQL server binaries (initdb, pg_ctl, postgres)');
  if (!redisServer) missing.push('redis-server');
  return { postgres, redisServer, missing };
}

/** True when something accepts a TCP connection on host:port within timeoutMs. */
export function isPortOpen(host: string, port: number, timeoutMs = 1_000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (open: boolean): void => {
      socket.removeAllListeners();
      socket.on('error', () => undefined);
      socket.destroy();
      resolve(open);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/** The ports this process handed out: a port is not bound until its server starts, so it must not be handed out twice. */
const portsHandedOut = new Set<number>();
const PORT_SLICE = 1_500;
const FIRST_PORT = 20_000;

/**
 * A TCP port on 127.0.0.1 that was free a moment ago, chosen below the kernel's ephemeral range (32768 and up on
 * Linux). A port the kernel picks for `listen(0)` comes from the pool it also draws the local port of every outgoing
 * connection from, so between our close() and a child's listen() any connection of any process (to Postgres, Redis,
 * an HTTP call) may take it: CI saw a sandbox provider fail with EADDRINUSE that way. Each jest worker draws from a
 * slice of its own (JEST_WORKER_ID), so two suites running side by side never pick the same port either; a process
 * outside jest (npm start, chaos, bench) uses slice 0.
 */
export async function freePort(): Promise<number> {
  const slice = Number(process.env.JEST_WORKER_ID ?? 0) % 8;
  const first = FIRST_PORT + slice * PORT_SLICE;
  for (let attempt = 0; attempt < 200; attempt += 1) {
    const port = first + Math.floor(Math.random() * PORT_SLICE);
    if (portsHandedOut.has(port) || !(await canListen(port))) continue;
    portsHandedOut.add(port);
    return port;
  }
  throw new Error(`no free port in ${first}-${first + PORT_SLICE - 1}`);
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------------------------------------------
// A minimal RESP client: enough for PING / CONFIG GET / AUTH without a dependency (ioredis is the apps' business).

type RespValue = string | number | null | RespValue[] | RespError;

export class RespError extends Error {
  override readonly name = 'RespError';
}

function parseResp(buffer: Buffer, offset: number): { value: RespValue; next: number } | null {
  if (offset >= buffer.length) return null;
  const lineEnd = buffer.indexOf('\r\n', offset);
  if (lineEnd < 0) return null;
  const type = String.fromCharCode(buffer[offset]);
  const line = buffer.toString('utf8', offset + 1, lineEnd);
  const afterLine = lineEnd + 2;
  switch (type) {
    case '+':
      return { value: line, next: afterLine };
    case '-':
      return { value: new RespError(line), next: afterLine };
    case ':':
      return { value: Number(line), next: afterLine };
    case '$': {
      const length = Number(line);
      if (length < 0) return { value: null, next: afterLine };
      if (buffer.length < afterLine + length + 2) return null;
      return { value: buffer.toString('utf8', afterLine, afterLine + length), next: afterLine + length + 2 };
    }
    case '*': {
      const count = Number(line);
      if (count < 0) return { value: null, next: afterLine };
      const items: RespValue[] = [];
      let next = afterLine;
      for (let i = 0; i < count; i++) {
        const item = parseResp(buffer, next);
        if (!item) return null;
        items.push(item.value);
        next = item.next;
      }
      return { value: items, next };
    }
    default:
      throw new RespError(`unexpected reply from Redis (type byte ${JSON.stringify(type)})`);
  }
}

function encodeCommand(args: string[]): string {
  return `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`;
}

/**
 * Sends commands on one connection and returns their replies in order (Redis errors come back as RespError values,
 * not thrown). Credentials in the URL are sent with AUTH first; `rediss://` uses TLS.
 */
export async function redisCommands(url: string, commands: string[][], timeoutMs = 3_000): Promise<RespValue[]> {
  const parsed = new URL(url);
  const host = parsed.hostname.replace(/^\[|\]$/g, '') || '127.0.0.1';
  const port = Number(parsed.port || 6379);
  const all: string[][] = [];
  if (parsed.password) {
    const user = decodeURIComponent(parsed.username);
    const password = decodeURIComponent(parsed.password);
    all.push(user && user !== 'default' ? ['AUTH', user, password] : ['AUTH', password]);
  }
  all.push(...commands);
  return new Promise((resolve, reject) => {
    const socket: net.Socket =
      parsed.protocol === 'rediss:' ? tls.connect({ host, port, servername: host }) : net.connect({ host, port });
    let buffer = Buffer.alloc(0);
    const replies: RespValue[] = [];
    const finish = (error: Error | null): void => {
      clearTimeout(timer);
      socket.removeAllListeners();
      socket.on('error', () => undefined);
      socket.destroy();
      if (error) reject(error);
      else resolve(parsed.password ? replies.slice(1) : replies);
    };
    const timer = setTimeout(
      () => finish(new Error(`Redis at ${host}:${port} did not answer in ${timeoutMs} ms`)),
      timeoutMs,
    );
    socket.once(parsed.protocol === 'rediss:' ? 'secureConnect' : 'connect', () => {
      socket.write(all.map(encodeCommand).join(''));
    });
    socket.on('data', (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      try {
        for (;;) {
          const item = parseResp(buffer, 0);
          if (!item) break;
          replies.push(item.value);
          buffer = buffer.subarray(item.next);
        }
      } catch (error) {
        finish(error as Error);
        return;
      }
      if (parsed.password && replies[0] instanceof RespError) finish(replies[0]);
      else if (replies.length >= all.length) finish(null);
    });
    socket.once('error', (error) => finish(error));
    socket.once('close', () => finish(new Error(`Redis at ${host}:${port} closed the connection`)));
  });
}

/** True when Redis answers PING with PONG. */
export async function redisPing(url: string, timeoutMs = 1_000): Promise<boolean> {
  try {
    const [reply] = await redisCommands(url, [['PING']], timeoutMs);
    return reply === 'PONG';
  } catch {
    return false;
  }
}

/** The server's maxmemory-policy, or null when CONFIG is not allowed (some managed Redis services rename it). */
export async function redisMaxmemoryPolicy(url: string, timeoutMs = 3_000): Promise<string | null> {
  const [reply] = await redisCommands(url, [['CONFIG', 'GET', 'maxmemory-policy']], timeoutMs);
  if (reply instanceof RespError) return null;
  return Array.isArray(reply) && typeof reply[1] === 'string' ? reply[1] : null;
}

// ---------------------------------------------------------------------------------------------------------------
// Private servers

export interface PrivateService {
  /** Connection URL for clients. */
  readonly url: string;
  /** The same server through its Unix-domain socket (same host only; docs/operations.md); null: it has none. */
  readonly socketUrl: string | null;
  readonly port: number;
  readonly dir: string;
  /** The server's log (stdout and stderr of the server process). */
  readonly logFile: string;
  /** Pid of the server process while it runs, else null. */
  readonly pid: number | null;
  readonly running: boolean;
  /** Clean shutdown; resolves when the process has exited (SIGKILL after timeoutMs). Idempotent. */
  stop(timeoutMs?: number): Promise<void>;
  /**
   * Sends a signal, as a crash or an operator would. SIGKILL goes to the whole process group (for Postgres: the
   * postmaster and every backend, like a machine losing power). For signals that end the process (SIGKILL,
   * SIGTERM, SIGINT, SIGQUIT) it resolves once the process has exited; SIGSTOP/SIGCONT resolve at once.
   */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** Stops the server if it is running, starts it again on the same port and data directory, waits until ready. */
  restart(): Promise<void>;
}

interface ManagedProcessOptions {
  name: string;
  command: string;
  args: string[];
  cwd: string;
  logFile: string;
  uid?: number;
  gid?: number;
  /** Signal for a clean stop (Postgres: SIGINT = fast shutdown; Redis: SIGTERM). */
  stopSignal: NodeJS.Signals;
  ready: () => Promise<boolean>;
  readyTimeoutMs: number;
}

const live = new Set<ManagedProcess>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // Last resort for a harness that throws or exits without stopping its servers: never leave one behind.
  // Only synchronous work is possible here, so the servers get their clean-stop signal and no wait.
  process.on('exit', () => {
    for (const managed of live) managed.signalSync(managed.stopSignal);
  });
}

class ManagedProcess {
  private child: ChildProcess | null = null;
  private exited: Promise<void> = Promise.resolve();
  private stopping: Promise<void> | null = null;

  constructor(private readonly options: ManagedProcessOptions) {}

  get stopSignal(): NodeJS.Signals {
    return this.options.stopSignal;
  }

  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  get running(): boolean {
    return this.child !== null;
  }

  async start(): Promise<void> {
    if (this.child) return;
    const { name, command, args, cwd, logFile, uid, gid } = this.options;
    const log = fs.openSync(logFile, 'a');
    let child: ChildProcess;
    try {
      fs.writeSync(log, `\n--- ${new Date().toISOString()} starting ${name}: ${command} ${args.join(' ')}\n`);
      child = spawn(command, args, {
        cwd,
        // Own process group: a Ctrl-C in the terminal reaches the harness, which stops its servers last and in
        // order, and SIGKILL can take the postmaster and its backends down together.
        detached: true,
        stdio: ['ignore', log, log],
        uid,
        gid,
        env: { ...process.env, LANG: 'C', LC_ALL: 'C' },
      });
    } finally {
      fs.closeSync(log);
    }
    // Unreferenced: a harness that forgets stop() still exits, and the exit hook below then stops the server.
    child.unref();
    this.child = child;
    live.add(this);
    installExitHook();
    const state: { exited: boolean; error: Error | null } = { exited: false, error: null };
    this.exited = new Promise<void>((resolve) => {
      const onGone = (): void => {
        state.exited = true;
        if (this.child === child) {
          this.child = null;
          live.delete(this);
        }
        resolve();
      };
      child.once('error', (error) => {
        state.error = error;
        onGone();
      });
      child.once('exit', onGone);
    });

    const deadline = Date.now() + this.options.readyTimeoutMs;
    while (Date.now() < deadline) {
      if (state.exited) {
        const reason = state.error ? `: ${state.error.message}` : '';
        throw new LocalServiceError(`${name} exited during startup${reason}\n${tail(logFile)}`);
      }
      if (await this.options.ready()) return;
      await sleep(100);
    }
    await this.kill('SIGKILL');
    throw new LocalServiceError(`${name} was not ready after ${this.options.readyTimeoutMs} ms\n${tail(logFile)}`);
  }

  signalSync(signal: NodeJS.Signals, group = false): void {
    const pid = this.child?.pid;
    if (!pid) return;
    try {
      process.kill(group ? -pid : pid, signal);
    } catch {
      // Already gone: nothing to signal.
    }
  }

  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    if (!this.child) return;
    this.signalSync(signal, signal === 'SIGKILL');
    if (['SIGKILL', 'SIGTERM', 'SIGINT', 'SIGQUIT'].includes(signal)) await this.exited;
  }

  stop(timeoutMs = 30_000): Promise<void> {
    if (!this.child) return Promise.resolve();
    if (this.stopping) return this.stopping;
    const stopping = (async () => {
      this.signalSync('SIGCONT'); // a paused (SIGSTOP) server cannot act on its stop signal
      this.signalSync(this.options.stopSignal);
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), timeoutMs);
      });
      // The deadline timer is cleared once the server exits, so it cannot hold the process open afterwards.
      const timedOut = await Promise.race([this.exited.then(() => false), deadline]);
      clearTimeout(timer);
      if (timedOut) await this.kill('SIGKILL');
    })();
    this.stopping = stopping;
    return stopping.finally(() => {
      this.stopping = null;
    });
  }
}

function tail(file: string, lines = 20): string {
  try {
    const text = fs.readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
    return `last lines of ${file}:\n${text}`;
  } catch {
    return `(no log at ${file})`;
  }
}

function serviceHandle(
  managed: ManagedProcess,
  url: string,
  socketUrl: string | null,
  port: number,
  dir: string,
  logFile: string,
): PrivateService {
  return {
    url,
    socketUrl,
    port,
    dir,
    logFile,
    get pid() {
      return managed.pid;
    },
    get running() {
      return managed.running;
    },
    stop: (timeoutMs?: number) => managed.stop(timeoutMs),
    kill: (signal?: NodeJS.Signals) => managed.kill(signal),
    restart: async () => {
      await managed.stop();
      await managed.start();
    },
  };
}

function isRoot(): boolean {
  return typeof process.getuid === 'function' && process.getuid() === 0;
}

interface OsUser {
  name: string;
  uid: number;
  gid: number;
}

function lookupUser(name: string): OsUser | null {
  try {
    for (const line of fs.readFileSync('/etc/passwd', 'utf8').split('\n')) {
      const fields = line.split(':');
      if (fields[0] === name && fields.length >= 4) return { name, uid: Number(fields[2]), gid: Number(fields[3]) };
    }
  } catch {
    // Fall through to id(1), which also sees users from NSS sources other than /etc/passwd.
  }
  const uid = spawnSync('id', ['-u', name], { encoding: 'utf8' });
  const gid = spawnSync('id', ['-g', name], { encoding: 'utf8' });
  if (uid.status === 0 && gid.status === 0)
    return { name, uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
  return null;
}

function chownTree(target: string, user: OsUser): void {
  fs.chownSync(target, user.uid, user.gid);
  if (!fs.statSync(target).isDirectory()) return;
  for (const entry of fs.readdirSync(target)) chownTree(path.join(target, entry), user);
}

function runAs(
  user: OsUser | null,
  command: string,
  args: string[],
  what: string,
  input?: string,
): { stdout: string; stderr: string } {
  const result = spawnSync(command, args, {
    uid: user?.uid,
    gid: user?.gid,
    input,
    encoding: 'utf8',
    timeout: 120_000,
    env: { ...process.env, LANG: 'C', LC_ALL: 'C' },
  });
  if (result.error) throw new LocalServiceError(`${what} failed: ${result.error.message}`);
  if (result.status !== 0) {
    throw new LocalServiceError(`${what} failed (exit ${result.status}):\n${result.stderr || result.stdout}`);
  }
  return { stdout: result.stdout, stderr: result.stderr };
}

/** Unix socket paths are limited to ~107 bytes; fall back to a short directory under the OS temp dir. */
function socketDirFor(preferred: string, port: number, owner: OsUser | null): string {
  if (Buffer.byteLength(path.join(preferred, `.s.PGSQL.${port}.lock`)) < 100) return preferred;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'verity-pg-'));
  if (owner) fs.chownSync(dir, owner.uid, owner.gid);
  return dir;
}

export interface PrivatePostgresOptions {
  /** Directory that holds everything: `data/` (the cluster), `run/` (the unix socket) and `postgres.log`. */
  dir: string;
  port: number;
  /** Database created with the cluster; default `verity`. */
  database?: string;
  /** Extra `-c name=value` server settings, e.g. `{ max_connections: '300' }`. fsync etc. keep their defaults. */
  settings?: Record<string, string>;
  readyTimeoutMs?: number;
}

/**
 * Starts a Postgres cluster of its own in `dir` (created with initdb on first use, kept across restarts), listening
 * on 127.0.0.1:port with trust authentication, and a database `verity`. As root, the server runs as the `postgres`
 * OS user (Postgres refuses to run as root) and `dir` is chowned to it.
 */
export async function startPrivatePostgres(options: PrivatePostgresOptions): Promise<PrivateService> {
  const binaries = findBinaries();
  if (!binaries.postgres) throw new MissingBinariesError(['the PostgreSQL server binaries (initdb, pg_ctl, postgres)']);
  const bin = binaries.postgres;
  const database = options.database ?? 'verity';
  if (!/^[a-z_][a-z0-9_]*$/.test(database)) throw new LocalServiceError(`invalid database name: ${database}`);
  const dir = path.resolve(options.dir);
  const dataDir = path.join(dir, 'data');
  const logFile = path.join(dir, 'postgres.log');

  let owner: OsUser | null = null;
  if (isRoot()) {
    owner = lookupUser('postgres');
    if (!owner) {
      throw new LocalServiceError(
        'running as root, and Postgres refuses to run as root, but there is no `postgres` OS user to run it as ' +
          '(the postgresql package creates one; or: useradd --system --home-dir /var/lib/postgresql postgres)',
      );
    }
  }

  fs.mkdirSync(path.join(dir, 'run'), { recursive: true });
  if (owner) {
    fs.chownSync(dir, owner.uid, owner.gid);
    fs.chownSync(path.join(dir, 'run'), owner.uid, owner.gid);
    // A parent directory that the postgres user cannot traverse (e.g. a checkout under /root) fails much later
    // with a confusing message from initdb; say it plainly now.
    const probe = spawnSync('test', ['-w', dir, '-a', '-x', dir], { uid: owner.uid, gid: owner.gid });
    if (probe.status !== 0) {
      throw new LocalServiceError(
        `the postgres OS user cannot write to ${dir} (a parent directory is not accessible to it). ` +
          `Use a checkout outside a private home directory, or start Postgres yourself and set DATABASE_URL.\n` +
          HOW_TO_GET_SERVICES,
      );
    }
  }

  const versionFile = path.join(dataDir, 'PG_VERSION');
  if (fs.existsSync(versionFile)) {
    const clusterVersion = Number(fs.readFileSync(versionFile, 'utf8').trim());
    if (bin.majorVersion !== null && clusterVersion !== bin.majorVersion) {
      throw new LocalServiceError(
        `${dataDir} holds a PostgreSQL ${clusterVersion} cluster but the installed server is ${bin.majorVersion}; ` +
          `remove ${dataDir} to start afresh (its data is lost) or install PostgreSQL ${clusterVersion}`,
      );
    }
    if (owner) chownTree(dataDir, owner);
  } else {
    // Built in a scratch directory and renamed into place, so an interrupted first run never leaves a half-made
    // cluster that later runs would try to start.
    const scratch = path.join(dir, 'data.initdb');
    fs.rmSync(scratch, { recursive: true, force: true });
    fs.mkdirSync(scratch, { mode: 0o700 });
    if (owner) fs.chownSync(scratch, owner.uid, owner.gid);
    runAs(
      owner,
      bin.initdb,
      ['-D', scratch, '-U', 'postgres', '--auth=trust', '--encoding=UTF8', '--locale=C'],
      `initdb into ${scratch}`,
    );
    // Single-user mode: no server, no port, no socket; the database exists before anything can connect.
    runAs(
      owner,
      bin.postgres,
      ['--single', '-D', scratch, '-F', '-c', 'listen_addresses=', 'postgres'],
      `creating database ${database}`,
      `CREATE DATABASE ${database};\n`,
    );
    fs.renameSync(scratch, dataDir);
  }

  const socketDir = socketDirFor(path.join(dir, 'run'), options.port, owner);
  const settings: Record<string, string> = {
    listen_addresses: '127.0.0.1',
    max_connections: '200',
    logging_collector: 'off',
    ...options.settings,
  };
  const args = ['-D', dataDir, '-p', String(options.port), '-k', socketDir];
  for (const [key, value] of Object.entries(settings)) args.push('-c', `${key}=${value}`);

  const pgIsReady = path.join(bin.binDir, 'pg_isready');
  const ready = async (): Promise<boolean> => {
    if (!(await isPortOpen('127.0.0.1', options.port, 500))) return false;
    // A listening postmaster still refuses connections while it recovers; pg_isready tells the two apart.
    if (!isExecutable(pgIsReady)) return true;
    const probe = spawnSync(pgIsReady, [
      '-q',
      '-h',
      '127.0.0.1',
      '-p',
      String(options.port),
      '-d',
      database,
      '-t',
      '2',
    ]);
    return probe.status === 0;
  };

  const managed = new ManagedProcess({
    name: `postgres (${dataDir}, port ${options.port})`,
    command: bin.postgres,
    args,
    cwd: dir,
    logFile,
    uid: owner?.uid,
    gid: owner?.gid,
    stopSignal: 'SIGINT',
    ready,
    readyTimeoutMs: options.readyTimeoutMs ?? 60_000,
  });
  await managed.start();
  return serviceHandle(
    managed,
    `postgres://postgres@127.0.0.1:${options.port}/${database}`,
    // The port names the socket file (.s.PGSQL.<port>) in the socket directory.
    `postgres://postgres@localhost:${options.port}/${database}?host=${encodeURIComponent(socketDir)}`,
    options.port,
    dir,
    logFile,
  );
}

export interface PrivateRedisOptions {
  /** Working directory: the append-only file (when enabled) and `redis.log`. */
  dir: string;
  port: number;
  /** Persist with an append-only file (fsync every second); default false. */
  appendonly?: boolean;
  readyTimeoutMs?: number;
  /** More server arguments (a Redis Cluster node: `--cluster-enabled yes` …). */
  extraArgs?: string[];
  /**
   * Also listen on a Unix socket, `<dir>/redis.sock` (`npm run bench -- --unix-sockets`); default false, as not every
   * filesystem a checkout lives on can hold one. Refused when the path is too long for a socket (~107 bytes).
   */
  unixSocket?: boolean;
}

/** Starts redis-server as a child process on 127.0.0.1:port with `maxmemory-policy noeviction` and no RDB saves. */
export async function startPrivateRedis(options: PrivateRedisOptions): Promise<PrivateService> {
  const { redisServer } = findBinaries();
  if (!redisServer) throw new MissingBinariesError(['redis-server']);
  const dir = path.resolve(options.dir);
  fs.mkdirSync(dir, { recursive: true });
  const logFile = path.join(dir, 'redis.log');
  const url = `redis://127.0.0.1:${options.port}`;
  const socket = path.join(dir, 'redis.sock');
  const withSocket = options.unixSocket === true;
  if (withSocket && Buffer.byteLength(socket) >= 100) {
    throw new LocalServiceError(`a Unix socket path must be shorter than 100 bytes: ${socket}`);
  }
  const args = [
    '--port',
    String(options.port),
    ...(withSocket ? ['--unixsocket', socket, '--unixsocketperm', '700'] : []),
    '--bind',
    '127.0.0.1',
    '--maxmemory-policy',
    'noeviction',
    '--save',
    '',
    '--appendonly',
    options.appendonly ? 'yes' : 'no',
    '--appendfsync',
    'everysec',
    '--dir',
    dir,
    '--daemonize',
    'no',
    ...(options.extraArgs ?? []),
  ];
  const managed = new ManagedProcess({
    name: `redis-server (${dir}, port ${options.port})`,
    command: redisServer,
    args,
    cwd: dir,
    logFile,
    stopSignal: 'SIGTERM',
    // While it loads an append-only file Redis answers -LOADING, not PONG: ready means the data is there.
    ready: () => redisPing(url, 500),
    readyTimeoutMs: options.readyTimeoutMs ?? 30_000,
  });
  await managed.start();
  return serviceHandle(managed, url, withSocket ? `unix://${socket}` : null, options.port, dir, logFile);
}
