/**
 * CPU per intake request of several API builds (or settings) in one sitting: one private Postgres, Redis and sandbox,
 * one API process per variant, intake rounds alternated between them (the order reversed every round), so a
 * neighbour's burst of load does not land on one variant only. Reports CPU ms per accepted request from /proc (the
 * API, Postgres, Redis), not req/s, which on a shared machine moves with the neighbours.
 *
 * Usage: node dist/test/bench/intake-ab.js [--rounds 6] [--seconds 5] [--prewarm 8] [--baseline | --side-by-side] <variant>...
 * With --baseline, the bench's node:http + INSERT baseline (baseline-intake.ts) runs as one more variant, alternated
 * like the others, and each variant's req/s is also printed as a % of the baseline's in the same sitting (the bench's
 * intake ratio, without the rest of `npm run bench`).
 * With --side-by-side, the rounds are not alternated: every API variant is loaded at once (25 connections each), and
 * API CPU per request is compared round by round. A neighbour's burst of load then lands on every variant at the same
 * moment, which on a busy shared machine separates a few percent that alternated rounds cannot (no --baseline then).
 * A variant is a built tree's dist directory, optionally followed by `:NAME=value` settings for that API's environment,
 * and `:ARGS=--flag,--flag` for node flags (after the API's own, appNodeArgs('api'), so they win), e.g. `dist` `/tmp/before/dist` `dist:ARGS=--max-semi-space-size=32`.
 */
import { ChildProcess, spawn } from 'node:child_process';
import * as path from 'node:path';
import autocannon from 'autocannon';
import { Client } from 'pg';
import { freePort } from '../../scripts/local-services';
import { appNodeArgs } from '../../libs/platform/src/runtime';
import { Cluster } from '../chaos/cluster';
import { cpuBetween, cpuSnapshot, rssOf } from './measure';
import { submission } from './workload';

interface Variant {
  label: string;
  child: ChildProcess;
  url: string;
}

const BASELINE = 'baseline';

/** The bench's intake baseline (baseline-intake.ts), against the cluster's Postgres; its table made first. */
async function startBaseline(cluster: Cluster): Promise<Variant> {
  const client = new Client({ connectionString: cluster.env.DATABASE_URL });
  await client.connect();
  await client.query(
    `CREATE TABLE IF NOT EXISTS bench_intake (id text PRIMARY KEY, body jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`,
  );
  await client.end();
  const port = await freePort();
  const child = spawn(process.execPath, [path.join(__dirname, 'baseline-intake.js')], {
    env: { ...process.env, DATABASE_URL: cluster.env.DATABASE_URL, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout?.on('data', (c: Buffer) => c.toString().includes('baseline listening') && resolve());
    child.once('exit', (code) => reject(new Error(`the baseline exited with ${code}`)));
  });
  return { label: BASELINE, child, url: `http://127.0.0.1:${port}/` };
}

const SUBMISSION = JSON.stringify(submission('bench-intake'));

function intake(url: string, seconds: number, connections = 50) {
  return autocannon({
    url,
    connections,
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer demo-agent-key' },
    body: SUBMISSION,
    duration: seconds,
    timeout: 30,
  });
}

/** Starts one API from `dist` against the cluster's services; ready when /health/live answers (any log level). */
async function startVariant(cluster: Cluster, spec: string): Promise<Variant> {
  const [dist, ...settings] = spec.split(':');
  const env: Record<string, string> = {};
  for (const setting of settings) env[setting.slice(0, setting.indexOf('='))] = setting.slice(setting.indexOf('=') + 1);
  const { ARGS, ...appEnv } = env;
  const port = await freePort();
  const child = spawn(
    process.execPath,
    [...appNodeArgs('api'), ...(ARGS ? ARGS.split(',') : []), path.resolve(dist, 'apps', 'api', 'src', 'main.js')],
    { env: { ...process.env, ...cluster.env, SEED_DEMO: 'false', ...appEnv, PORT: String(port) }, stdio: 'ignore' },
  );
  const base = `http://127.0.0.1:${port}`;
  for (const deadline = Date.now() + 60_000; Date.now() < deadline;) {
    if (child.exitCode !== null) throw new Error(`the API of ${spec} exited with ${child.exitCode}`);
    const live = await fetch(`${base}/health/live`).then(
      (res) => res.ok,
      () => false,
    );
    if (live) return { label: spec, child, url: `${base}/v1/executions` };
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  child.kill('SIGKILL');
  throw new Error(`the API of ${spec} was not live in 60 s`);
}

/** Every API variant under load at once, each on its own connections; API CPU per accepted request, per round. */
async function sideBySideRounds(cluster: Cluster, apis: Variant[], rounds: number, seconds: number): Promise<void> {
  const pids = Object.fromEntries(apis.map((v, i) => [`api ${i}`, v.child.pid ?? null]));
  const perRequest = apis.map(() => [] as number[]);
  for (let round = 0; round < rounds; round += 1) {
    await Promise.all(apis.map((v) => intake(v.url, 2, 25)));
    const before = cpuSnapshot(cluster, pids);
    const results = await Promise.all(apis.map((v) => intake(v.url, seconds, 25)));
    const used = cpuBetween(before, cpuSnapshot(cluster, pids)).byLabel;
    apis.forEach((_, i) => perRequest[i].push((used[`api ${i}`] ?? 0) / Math.max(1, results[i]['2xx'])));
    process.stdout.write(
      `side by side, round ${round + 1}: ` +
        apis.map((v, i) => `${v.label} ${perRequest[i][round].toFixed(3)} (${results[i].non2xx} non-2xx)`).join(', ') +
        '\n',
    );
  }
  const first = perRequest[0];
  apis.forEach((v, i) => {
    const mean = perRequest[i].reduce((a, b) => a + b, 0) / rounds;
    const vsFirst = perRequest[i].map((ms, round) => ms / first[round]).sort((a, b) => a - b);
    process.stdout.write(
      `side by side: ${v.label}: API CPU ms per request mean ${mean.toFixed(3)}` +
        (i === 0 ? '' : `, round by round ${vsFirst[Math.floor(rounds / 2)].toFixed(3)}× the first (median)`) +
        '\n',
    );
  });
}

function option(args: string[], name: string, fallback: number): number {
  const at = args.indexOf(`--${name}`);
  return at >= 0 ? Number(args.splice(at, 2)[1]) : fallback;
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const rounds = option(args, 'rounds', 6);
  const seconds = option(args, 'seconds', 5);
  const prewarm = option(args, 'prewarm', 8);
  const withBaseline = args.includes('--baseline');
  if (withBaseline) args.splice(args.indexOf('--baseline'), 1);
  const sideBySide = args.includes('--side-by-side');
  if (sideBySide) args.splice(args.indexOf('--side-by-side'), 1);
  if (sideBySide && withBaseline) throw new Error('--side-by-side compares API variants only: leave out --baseline');
  if (args.length === 0) throw new Error('name at least one variant (a dist directory)');
  // Production windows, the rate limit lifted: one tenant is the whole load. No workers: intake alone is measured.
  const cluster = await Cluster.start({
    dispatchers: 0,
    reconcilers: 0,
    timings: { RATE_LIMIT_PER_MINUTE: '100000000', LOG_LEVEL: 'info' },
  });
  const variants: Variant[] = [];
  try {
    await cluster.app('api').stop();
    for (const spec of args) variants.push(await startVariant(cluster, spec));
    if (withBaseline) variants.push(await startBaseline(cluster));
    // The JIT's first seconds would otherwise count against whichever variant is measured first.
    for (const variant of variants) await intake(variant.url, prewarm);
    if (sideBySide) {
      await sideBySideRounds(cluster, variants, rounds, seconds);
      return;
    }
    const apiMs = new Map<string, number[]>(variants.map((v) => [v.label, []]));
    const rates = new Map<string, number[]>(variants.map((v) => [v.label, []]));
    const serviceMs = new Map<string, { postgres: number[]; redis: number[] }>(
      variants.map((v) => [v.label, { postgres: [], redis: [] }]),
    );
    for (let round = 0; round < rounds; round += 1) {
      for (const variant of round % 2 === 0 ? variants : [...variants].reverse()) {
        await intake(variant.url, 2);
        // The process measured: the API, or the baseline's own (cpuSnapshot labels it so).
        const own = variant.label === BASELINE ? 'baseline' : 'api';
        const pid = { [own]: variant.child.pid ?? null };
        const before = cpuSnapshot(cluster, pid);
        const result = await intake(variant.url, seconds);
        const used = cpuBetween(before, cpuSnapshot(cluster, pid)).byLabel;
        const ok = Math.max(1, result['2xx']);
        const per = (label: string) => (used[label] ?? 0) / ok;
        apiMs.get(variant.label)!.push(per(own));
        rates.get(variant.label)!.push(ok / result.duration);
        serviceMs.get(variant.label)!.postgres.push(per('postgres'));
        serviceMs.get(variant.label)!.redis.push(per('redis'));
        process.stdout.write(
          `${variant.label}  round ${round + 1}: ${(ok / result.duration).toFixed(0)} req/s, CPU ms per request: ` +
            `${own} ${per(own).toFixed(3)}, postgres ${per('postgres').toFixed(3)}, redis ${per('redis').toFixed(3)}; ` +
            `non-2xx ${result.non2xx}, RSS ${((rssOf(variant.child.pid) ?? 0) / 2 ** 20).toFixed(0)} MB\n`,
        );
      }
    }
    const meanOf = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const baselineRate = withBaseline ? meanOf(rates.get(BASELINE)!) : null;
    for (const [label, values] of apiMs) {
      const sorted = [...values].sort((a, b) => a - b);
      const rate = meanOf(rates.get(label)!);
      process.stdout.write(
        `${label}: ${label === BASELINE ? 'baseline' : 'API'} CPU ms per request median ` +
          `${sorted[Math.floor(sorted.length / 2)].toFixed(3)}, mean ${meanOf(values).toFixed(3)} ` +
          `[${values.map((v) => v.toFixed(3)).join(', ')}]; postgres mean ` +
          `${meanOf(serviceMs.get(label)!.postgres).toFixed(3)}, redis ${meanOf(serviceMs.get(label)!.redis).toFixed(3)}; ` +
          `${rate.toFixed(0)} req/s` +
          (baselineRate && label !== BASELINE
            ? `, ${((100 * rate) / baselineRate).toFixed(1)} % of the baseline`
            : '') +
          '\n',
      );
    }
    if (sideBySide)
      await sideBySideRounds(
        cluster,
        variants.filter((v) => v.label !== BASELINE),
        rounds,
        seconds,
      );
  } finally {
    for (const variant of variants) variant.child.kill('SIGTERM');
    await cluster.stop();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
