/**
 * Where the machine's time goes: CPU per process (from /proc/<pid>/stat), memory (VmRSS), the whole machine's busy
 * time (/proc/stat, so neighbours' load shows up as "other"), Postgres commits and Redis commands. Linux only, which
 * is where the numbers in docs/benchmarks.md come from.
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import type { Pool } from 'pg';
import { redisCommands } from '../../scripts/local-services';
import type { Cluster } from '../chaos/cluster';
import type { Stack } from '../support/stack';

const TICKS_PER_SECOND = (() => {
  const out = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' });
  const n = Number(out.stdout?.trim());
  return Number.isFinite(n) && n > 0 ? n : 100;
})();

function statFields(pid: number): string[] | null {
  try {
    const text = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name sits in parentheses and may hold spaces: fields are counted after the last ')'.
    return text.slice(text.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

/** utime + stime of one process (and, with `reaped`, of its waited-for children), in ms. */
export function cpuMs(pid: number, reaped = false): number {
  const f = statFields(pid);
  if (!f) return 0;
  // After the comm field: [0]=state [1]=ppid ... [11]=utime [12]=stime [13]=cutime [14]=cstime
  const ticks = Number(f[11]) + Number(f[12]) + (reaped ? Number(f[13]) + Number(f[14]) : 0);
  return (ticks * 1000) / TICKS_PER_SECOND;
}

function childrenOf(parent: number): number[] {
  const pids: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const f = statFields(Number(entry));
    if (f && Number(f[1]) === parent) pids.push(Number(entry));
  }
  return pids;
}

function machineTicks(): { busy: number; total: number } {
  const line = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0];
  const values = line.trim().split(/\s+/).slice(1).map(Number);
  const total = values.slice(0, 8).reduce((a, b) => a + b, 0);
  const idle = values[3] + (values[4] ?? 0);
  return { busy: ((total - idle) * 1000) / TICKS_PER_SECOND, total: (total * 1000) / TICKS_PER_SECOND };
}

export interface CpuSnapshot {
  at: number;
  byLabel: Record<string, number>;
  machineBusyMs: number;
}

/** CPU consumed so far by each part: every app process (by kind), Postgres (all backends), Redis, this process. */
export function cpuSnapshot(cluster: Cluster, extra: Record<string, number | null> = {}): CpuSnapshot {
  const byLabel: Record<string, number> = {};
  const add = (label: string, ms: number) => (byLabel[label] = (byLabel[label] ?? 0) + ms);
  for (const app of cluster.apps) if (app.pid && app.alive) add(app.name, cpuMs(app.pid));
  const postmaster = cluster.postgres.pid;
  if (postmaster) {
    add('postgres', cpuMs(postmaster, true));
    for (const child of childrenOf(postmaster)) add('postgres', cpuMs(child));
  }
  if (cluster.redis.pid) add('redis', cpuMs(cluster.redis.pid));
  for (const [label, pid] of Object.entries(extra)) if (pid) add(label, cpuMs(pid));
  const self = process.cpuUsage();
  add('bench client', (self.user + self.system) / 1000);
  return { at: Date.now(), byLabel, machineBusyMs: machineTicks().busy };
}

export interface CpuUse {
  elapsedMs: number;
  /** CPU ms per label over the interval. */
  byLabel: Record<string, number>;
  /** Busy CPU ms of the whole machine, including processes that are not ours (other developers' tests). */
  machineBusyMs: number;
  otherMs: number;
}

export function cpuBetween(a: CpuSnapshot, b: CpuSnapshot): CpuUse {
  const byLabel: Record<string, number> = {};
  for (const [label, ms] of Object.entries(b.byLabel)) byLabel[label] = Math.max(0, ms - (a.byLabel[label] ?? 0));
  const ours = Object.values(byLabel).reduce((x, y) => x + y, 0);
  const machineBusyMs = b.machineBusyMs - a.machineBusyMs;
  return { elapsedMs: b.at - a.at, byLabel, machineBusyMs, otherMs: Math.max(0, machineBusyMs - ours) };
}

/** Resident memory of one process from /proc (VmRSS), in bytes; null once it is gone. */
export function rssOf(pid: number | null | undefined): number | null {
  if (!pid) return null;
  try {
    const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) * 1024 : null;
  } catch {
    return null;
  }
}

/** Samples every app's RSS until stopped; keeps the maximum per app kind. */
export class RssSampler {
  readonly max: Record<string, number> = {};
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly cluster: Cluster) {}

  sample(): void {
    for (const app of this.cluster.apps) {
      const rss = app.rssBytes();
      if (rss !== null) this.max[app.name] = Math.max(this.max[app.name] ?? 0, rss);
    }
  }

  start(intervalMs = 250): this {
    this.sample();
    this.timer = setInterval(() => this.sample(), intervalMs);
    return this;
  }

  stop(): Record<string, number> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.sample();
    return { ...this.max };
  }
}

export async function pgCommits(pool: Pool): Promise<number> {
  // Backends publish their counters at most about once a second; over a window of many seconds that lag cancels out.
  const { rows } = await pool.query<{ n: string }>(
    `SELECT xact_commit AS n FROM pg_stat_database WHERE datname = current_database()`,
  );
  return Number(rows[0].n);
}

export async function redisCommandCount(url: string): Promise<number> {
  const [info] = await redisCommands(url, [['INFO', 'stats']]);
  const match = /total_commands_processed:(\d+)/.exec(String(info));
  return match ? Number(match[1]) : 0;
}

export function machineDescription(): string {
  const cpus = os.cpus();
  const model = cpus[0]?.model?.replace(/\s+/g, ' ').trim() ?? 'unknown CPU';
  const memGb = (os.totalmem() / 1024 ** 3).toFixed(0);
  return `${cpus.length} × ${model}, ${memGb} GB RAM, ${os.type()} ${os.release()}, Node ${process.version}`;
}

export function loadAverage(): string {
  return os
    .loadavg()
    .map((n) => n.toFixed(2))
    .join(' ');
}

/** Runs `work`; what it cost process `pid` in CPU (utime + stime, ms) and how long it took (s). */
export async function measured(pid: number, work: () => Promise<void>): Promise<{ cpuMs: number; seconds: number }> {
  const cpu0 = cpuMs(pid);
  const started = performance.now();
  await work();
  const seconds = (performance.now() - started) / 1000;
  return { cpuMs: cpuMs(pid) - cpu0, seconds };
}

/**
 * Runs a bench script on a local stack: `bench` with the stack `start` starts, stopped afterwards whatever happens.
 * What `bench` returns is printed as one JSON line, the machine's 1-minute load average (taken before the stack stops)
 * at its end; a failure is printed and sets the exit code.
 */
export function benchOnStack(start: () => Promise<Stack>, bench: (stack: Stack) => Promise<Record<string, unknown>>) {
  const run = async () => {
    const stack = await start();
    try {
      const result = await bench(stack);
      console.log(JSON.stringify({ ...result, load: os.loadavg()[0].toFixed(1) }));
    } finally {
      await stack.stop();
    }
  };
  run().catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}
