/**
 * `npm run bench`: everything on this machine in one go, with every ratio measured against a baseline of the same
 * run — a bare node:http + one INSERT for intake, bare BullMQ jobs of one CAS+event transaction for the pipeline.
 * It runs a private Postgres and Redis (cluster.ts), so nobody else's data is touched and the numbers are not
 * skewed by other databases on the shared server; other processes on the machine still compete for the CPU, and
 * the table says how much ("other load").
 */
import { ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import autocannon from 'autocannon';
import { Queue } from 'bullmq';
import { Pool } from 'pg';
import { Verity } from '@verity/sdk';
import { appNodeArgs } from '../../libs/platform/src/runtime';
import { freePort, redisCommands } from '../../scripts/local-services';
import { Cluster, DIST, SandboxEffects, sleep, within } from '../chaos/cluster';
import { percentile } from '../chaos/invariants';
import { summarise } from './profile-summary';
import {
  CpuUse,
  RssSampler,
  cpuBetween,
  cpuSnapshot,
  loadAverage,
  machineDescription,
  pgCommits,
  redisCommandCount,
  rssOf,
} from './measure';
import { submission } from './workload';
import type { PeerOutcome } from './dbos-peer';

interface BenchOptions {
  intakeSeconds: number;
  rounds: number;
  warmupSeconds: number;
  e2eSeconds: number;
  inflight: number;
  ceilingJobs: number;
  idleSamples: number;
  moderateSeconds: number;
  /** Rounds of the DBOS peer (each e2eSeconds long, interleaved with Verity's); 0 leaves the peer out. */
  peerRounds: number;
  keep: boolean;
  /** Write V8 CPU profiles of every app (node --cpu-prof) into <dir>/profiles and summarise them. */
  profile: boolean;
  /** Verity's apps and the DBOS peer reach Postgres and Redis through Unix-domain sockets (docs/operations.md). */
  unixSockets: boolean;
}

const DEFAULTS: BenchOptions = {
  intakeSeconds: 15,
  rounds: 2,
  warmupSeconds: 3,
  e2eSeconds: 20,
  inflight: 64,
  ceilingJobs: 10_000,
  idleSamples: 40,
  moderateSeconds: 20,
  peerRounds: 2,
  keep: false,
  profile: false,
  unixSockets: false,
};

/** Production defaults for every window (no test shortcuts), the rate limit lifted: one tenant is the whole load. */
const BENCH_TIMINGS: Record<string, string> = {
  RATE_LIMIT_PER_MINUTE: '100000000',
  LOG_LEVEL: 'info',
  // `BENCH_APP_<NAME>=value npm run bench` sets <NAME> for every app: a before/after of one setting in the same tree
  // (e.g. BENCH_APP_VERIFY_AT_SEND=false).
  ...Object.fromEntries(
    Object.entries(process.env)
      .filter(([name, value]) => name.startsWith('BENCH_APP_') && value !== undefined)
      .map(([name, value]) => [name.slice('BENCH_APP_'.length), value as string]),
  ),
};
const AGENT_KEY = 'demo-agent-key';
const CONNECTIONS = 50;

const started = Date.now();
const note = (line: string) =>
  process.stderr.write(`${((Date.now() - started) / 1000).toFixed(1).padStart(6)}s  ${line}\n`);

// ---------------------------------------------------------------------------------------------------------------
// Intake

interface IntakeRun {
  target: 'verity' | 'baseline';
  requestsPerSecond: number;
  p50: number;
  p99: number;
  non2xx: number;
  errors: number;
  cpu: CpuUse;
  ok: number;
}

async function intakeRound(
  cluster: Cluster,
  target: 'verity' | 'baseline',
  url: string,
  options: BenchOptions,
  baselinePid: number | null,
): Promise<IntakeRun> {
  const request = {
    url,
    connections: CONNECTIONS,
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${AGENT_KEY}` },
    body: JSON.stringify(submission('bench-intake')),
    timeout: 30,
  };
  await autocannon({ ...request, duration: options.warmupSeconds });
  const before = cpuSnapshot(cluster, { baseline: baselinePid });
  const result = await autocannon({ ...request, duration: options.intakeSeconds });
  const after = cpuSnapshot(cluster, { baseline: baselinePid });
  const ok = result['2xx'];
  return {
    target,
    requestsPerSecond: ok / result.duration,
    p50: result.latency.p50,
    p99: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
    cpu: cpuBetween(before, after),
    ok,
  };
}

async function benchIntake(cluster: Cluster, pool: Pool, options: BenchOptions) {
  await pool.query(
    `CREATE TABLE IF NOT EXISTS bench_intake (id text PRIMARY KEY, body jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`,
  );
  // The baselines reach Postgres and Redis as the apps do (cluster.env: TCP, or the Unix sockets with --unix-sockets).
  const baseline = await startHelper('baseline-intake', 'baseline listening', {
    DATABASE_URL: cluster.env.DATABASE_URL,
    PORT: String(await freePort()),
  });
  const runs: IntakeRun[] = [];
  try {
    for (let round = 1; round <= options.rounds; round += 1) {
      // Interleaved, so a neighbour's burst of load does not land on one side only.
      for (const target of ['baseline', 'verity'] as const) {
        const url = target === 'verity' ? `${cluster.apiUrl}/v1/executions` : baseline.url;
        const run = await intakeRound(cluster, target, url, options, baseline.child.pid ?? null);
        note(
          `intake ${target} round ${round}: ${run.requestsPerSecond.toFixed(0)} req/s, p50 ${run.p50} ms, p99 ${run.p99} ms` +
            (run.non2xx || run.errors ? `, non-2xx ${run.non2xx}, errors ${run.errors}` : ''),
        );
        runs.push(run);
      }
    }
  } finally {
    await baseline.stop();
  }
  const of = (target: IntakeRun['target']) => runs.filter((r) => r.target === target);
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  const summary = (target: IntakeRun['target']) => {
    const rs = of(target);
    const ok = rs.reduce((n, r) => n + r.ok, 0);
    const cpuPerRequest: Record<string, number> = {};
    for (const r of rs) {
      for (const [label, ms] of Object.entries(r.cpu.byLabel)) cpuPerRequest[label] = (cpuPerRequest[label] ?? 0) + ms;
    }
    for (const label of Object.keys(cpuPerRequest)) cpuPerRequest[label] /= Math.max(1, ok);
    return {
      requestsPerSecond: mean(rs.map((r) => r.requestsPerSecond)),
      p50: mean(rs.map((r) => r.p50)),
      p99: mean(rs.map((r) => r.p99)),
      non2xx: rs.reduce((n, r) => n + r.non2xx + r.errors, 0),
      cpuPerRequest,
      otherLoad: mean(rs.map((r) => r.cpu.otherMs / r.cpu.elapsedMs)),
      rounds: rs.map((r) => r.requestsPerSecond),
    };
  };
  return { verity: summary('verity'), baseline: summary('baseline') };
}

/**
 * autocannon stops at its deadline without waiting for the answers still in flight: give the API a moment to finish
 * them, and retry if a late INSERT still collides with the TRUNCATE.
 */
async function resetData(cluster: Cluster, pool: Pool): Promise<void> {
  for (let attempt = 1; ; attempt += 1) {
    await sleep(2_000);
    try {
      await pool.query(`TRUNCATE executions, operations, events, idempotency_keys CASCADE`);
      break;
    } catch (error) {
      if (attempt >= 5) throw error;
    }
  }
  await redisCommands(cluster.redis.url, [['FLUSHALL']]);
}

// ---------------------------------------------------------------------------------------------------------------
// Ceiling: bare BullMQ jobs, one CAS + event transaction each

async function benchCeiling(cluster: Cluster, pool: Pool, workers: number, jobs: number) {
  await pool.query(
    `CREATE TABLE IF NOT EXISTS bench_ops (id text PRIMARY KEY, status text NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())`,
  );
  await pool.query(
    `CREATE TABLE IF NOT EXISTS bench_events (id bigserial PRIMARY KEY, operation_id text NOT NULL, from_status text,
       to_status text, created_at timestamptz NOT NULL DEFAULT clock_timestamp())`,
  );
  await pool.query(`CREATE INDEX IF NOT EXISTS bench_events_operation ON bench_events (operation_id)`);
  await pool.query(`TRUNCATE bench_ops, bench_events`);
  await pool.query(`INSERT INTO bench_ops (id, status) SELECT 'op' || g, 'PENDING' FROM generate_series(1, $1) g`, [
    jobs,
  ]);
  const queue = new Queue('bench-ceiling', {
    connection: { url: cluster.redis.url, maxRetriesPerRequest: null },
    prefix: '{bench}',
  });
  queue.on('error', () => undefined);
  await queue.obliterate({ force: true });
  // Paused while filling and while the workers boot, so all of them start on a full queue at the same moment.
  await queue.pause();
  for (let i = 1; i <= jobs; i += 1000) {
    const batch = [];
    for (let j = i; j < Math.min(i + 1000, jobs + 1); j += 1) {
      batch.push({ name: 'cas', data: { id: `op${j}` }, opts: { removeOnComplete: true, removeOnFail: true } });
    }
    await queue.addBulk(batch);
  }
  const helpers = [];
  for (let i = 0; i < workers; i += 1) {
    helpers.push(
      await startHelper('ceiling-worker', 'ceiling worker ready', {
        DATABASE_URL: cluster.env.DATABASE_URL,
        REDIS_URL: cluster.env.REDIS_URL,
      }),
    );
  }
  const before = cpuSnapshot(
    cluster,
    Object.fromEntries(helpers.map((h, i) => [`ceiling worker ${i}`, h.child.pid ?? null])),
  );
  await queue.resume();
  const deadline = Date.now() + 180_000;
  for (;;) {
    const { rows } = await pool.query<{ n: string }>(`SELECT count(*) AS n FROM bench_events`);
    if (Number(rows[0].n) >= jobs) break;
    if (Date.now() > deadline) throw new Error(`ceiling: only ${rows[0].n} of ${jobs} jobs done in 180 s`);
    await sleep(100);
  }
  const after = cpuSnapshot(
    cluster,
    Object.fromEntries(helpers.map((h, i) => [`ceiling worker ${i}`, h.child.pid ?? null])),
  );
  const { rows } = await pool.query<{ seconds: number }>(
    `SELECT extract(epoch FROM max(created_at) - min(created_at))::float8 AS seconds FROM bench_events`,
  );
  await Promise.all(helpers.map((h) => h.stop()));
  await queue.obliterate({ force: true }).catch(() => undefined);
  await queue.close();
  await pool.query(`TRUNCATE bench_ops, bench_events`);
  const jobsPerSecond = jobs / Math.max(0.001, rows[0].seconds);
  const cpu = cpuBetween(before, after);
  note(`ceiling with ${workers} worker process(es): ${jobsPerSecond.toFixed(0)} jobs/s`);
  return { workers, jobsPerSecond, cpu, otherLoad: cpu.otherMs / cpu.elapsedMs };
}

// ---------------------------------------------------------------------------------------------------------------
// End to end: operations reaching VERIFIED through the sandbox, closed loop with `inflight` operations open

const UNSETTLED = `status IN ('PREPARED','SENT','ACKNOWLEDGED','UNKNOWN','RECONCILING')`;

async function unsettled(pool: Pool): Promise<number> {
  const { rows } = await pool.query<{ n: string }>(`SELECT count(*) AS n FROM operations WHERE ${UNSETTLED}`);
  return Number(rows[0].n);
}

async function waitUntilSettled(pool: Pool, timeoutMs = 180_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while ((await unsettled(pool)) > 0) {
    if (Date.now() > deadline) throw new Error('operations did not settle');
    await sleep(100);
  }
}

async function latencies(pool: Pool, window: { from: Date; to: Date } | { executionIds: string[] }) {
  const byIds = 'executionIds' in window;
  const { rows } = await pool.query<{ ms: number }>(
    `SELECT extract(epoch FROM v.created_at - e.created_at)::float8 * 1000 AS ms
       FROM events v JOIN executions e ON e.id = v.execution_id
      WHERE v.type = 'operation.status_changed' AND v.to_status = 'VERIFIED'
        AND ${byIds ? 'e.id = ANY($1)' : 'v.created_at >= $1 AND v.created_at < $2'}`,
    byIds ? [window.executionIds] : [window.from, window.to],
  );
  const ms = rows.map((r) => r.ms).sort((a, b) => a - b);
  return { count: ms.length, p50: percentile(ms, 50), p99: percentile(ms, 99) };
}

/**
 * The closed loop both systems are driven by: `top(open)` starts as many submissions as it takes to have `inflight`
 * operations open (those the system has not settled plus the submissions still on their way).
 */
class ClosedLoop {
  pending = 0;
  submitted = 0;
  failures = 0;

  constructor(
    private readonly inflight: number,
    private readonly start: (n: number) => Promise<unknown>,
  ) {}

  top(open: number): void {
    for (let deficit = this.inflight - open - this.pending; deficit > 0; deficit -= 1) {
      this.pending += 1;
      this.submitted += 1;
      this.start(this.submitted)
        .catch(() => (this.failures += 1))
        .finally(() => (this.pending -= 1));
    }
  }

  async drained(): Promise<void> {
    while (this.pending > 0) await sleep(20);
  }
}

async function benchEndToEnd(cluster: Cluster, pool: Pool, agent: Verity, options: BenchOptions, tag: string) {
  const loop = new ClosedLoop(options.inflight, (n) => agent.executions.create(submission(`bench-${tag}-${n}`)));
  const measureFrom = Date.now() + options.warmupSeconds * 1000;
  const end = measureFrom + options.e2eSeconds * 1000;
  let window: { from: Date; cpu: ReturnType<typeof cpuSnapshot>; commits: number; redis: number } | null = null;
  let polls = 0;
  while (Date.now() < end) {
    const open = await unsettled(pool);
    if (window) polls += 1;
    loop.top(open);
    if (!window && Date.now() >= measureFrom) {
      window = {
        from: new Date(),
        cpu: cpuSnapshot(cluster),
        commits: await pgCommits(pool),
        redis: await redisCommandCount(cluster.redis.url),
      };
      await pool.query(`SELECT pg_stat_statements_reset()`).catch(() => undefined);
      polls = 0;
    }
    // Coarse on purpose: each poll is a transaction of its own, and they are subtracted from the count below.
    await sleep(100);
  }
  if (!window) throw new Error('the measurement window never opened');
  const to = new Date();
  const cpu = cpuBetween(window.cpu, cpuSnapshot(cluster));
  const commits = (await pgCommits(pool)) - window.commits - polls - 2;
  const statements = await topStatements(pool);
  const redisCommands = (await redisCommandCount(cluster.redis.url)) - window.redis;
  await loop.drained();
  await waitUntilSettled(pool);
  const inWindow = await latencies(pool, { from: window.from, to });
  const { rows: eventRows } = await pool.query<{ n: string }>(
    `SELECT count(*) AS n FROM events WHERE created_at >= $1 AND created_at < $2`,
    [window.from, to],
  );
  const seconds = (to.getTime() - window.from.getTime()) / 1000;
  const perOp = (n: number) => n / Math.max(1, inWindow.count);
  const cpuPerOp: Record<string, number> = {};
  for (const [label, ms] of Object.entries(cpu.byLabel)) cpuPerOp[label] = perOp(ms);
  const result = {
    dispatchers: cluster.of('dispatcher').filter((a) => a.alive).length,
    verifiedPerSecond: inWindow.count / seconds,
    p50: inWindow.p50,
    p99: inWindow.p99,
    /** Every transaction Postgres committed, reads included (each autocommit SELECT is one). */
    commitsPerOp: perOp(commits),
    /** Events written: one per status change or annotation, each a write transaction of its own today. */
    eventsPerOp: perOp(Number(eventRows[0].n)),
    redisCommandsPerOp: perOp(redisCommands),
    cpuPerOp,
    otherLoad: cpu.otherMs / cpu.elapsedMs,
    failures: loop.failures,
    /** Executions accepted in this round, each one charge: what the provider is cross-checked against. */
    created: loop.submitted - loop.failures,
    statements: statements.map((st) => ({ ...st, perOp: perOp(st.calls) })),
  };
  note(
    `end-to-end with ${result.dispatchers} dispatcher(s): ${result.verifiedPerSecond.toFixed(1)} VERIFIED/s ` +
      `(p50 ${result.p50.toFixed(0)} ms), ${result.commitsPerOp.toFixed(1)} transactions/op, ` +
      `${result.eventsPerOp.toFixed(1)} events/op`,
  );
  return result;
}

/** The statements Postgres ran most often in the window (pg_stat_statements, loaded in the private cluster). */
async function topStatements(pool: Pool) {
  try {
    const { rows } = await pool.query<{ query: string; calls: string; mean: number }>(
      `SELECT regexp_replace(query, '\\s+', ' ', 'g') AS query, calls, mean_exec_time AS mean
         FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
        ORDER BY calls DESC LIMIT 14`,
    );
    return rows.map((r) => ({ query: r.query, calls: Number(r.calls), meanMs: r.mean }));
  } catch {
    return [];
  }
}

/**
 * How the idle phase waits for each execution: `sdk` (what the full run reports) with `waitForSettled` — a GET, the
 * event stream and a GET after events — as an agent would; `poll` (`BENCH_ONLY=idle BENCH_IDLE_WAIT=poll`, a
 * diagnostic) by looking at the row from the benchmark's own pool 100 ms after the submission and every 50 ms after, so
 * that the client's reads (in the API and Postgres, on the same cores) do not overlap the execution's steps. The
 * latency is taken from Postgres' clock either way.
 */
type IdleWait = 'sdk' | 'poll';

async function completedInPostgres(pool: Pool, executionId: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  await sleep(100);
  for (;;) {
    const { rows } = await pool.query<{ status: string }>(`SELECT status FROM executions WHERE id = $1`, [executionId]);
    if (rows[0]?.status === 'completed') return;
    if (Date.now() > deadline) throw new Error(`execution ${executionId} did not complete`);
    await sleep(50);
  }
}

/** One operation at a time on an otherwise idle system: submit, then wait (SDK) until the execution settled. */
async function benchIdleLatency(pool: Pool, agent: Verity, samples: number, peer?: Peer, wait: IdleWait = 'sdk') {
  const ids: string[] = [];
  const client: number[] = [];
  const peerIds: string[] = [];
  const peerClient: number[] = [];
  const verityOnce = async (i: number) => {
    const t0 = performance.now();
    const execution = await agent.executions.create(submission(`bench-idle-${Date.now()}-${i}`));
    if (wait === 'poll') await completedInPostgres(pool, execution.id);
    else await agent.waitForSettled(execution.id, { timeoutMs: 30_000 });
    client.push(performance.now() - t0);
    ids.push(execution.id);
    await sleep(100);
  };
  // The peer answers once its workflow ended: each sample is waited for before the next.
  const peerOnce = async (i: number) => {
    const t0 = performance.now();
    const { id } = await submitToPeer(peer!, `dbos-idle-${Date.now()}-${i}`, true);
    peerClient.push(performance.now() - t0);
    peerIds.push(id);
    await sleep(100);
  };
  // With the peer, the samples alternate between the two systems (which goes first swapping every pair), as the
  // throughput rounds do: a drift in the machine's load over the minute this takes falls on both medians alike.
  for (let i = 0; i < samples; i += 1) {
    if (!peer) await verityOnce(i);
    else if (i % 2 === 0) await verityOnce(i).then(() => peerOnce(i));
    else await peerOnce(i).then(() => verityOnce(i));
  }
  client.sort((a, b) => a - b);
  const db = await latencies(pool, { executionIds: ids });
  note(`idle latency intake → VERIFIED: p50 ${db.p50.toFixed(1)} ms, p99 ${db.p99.toFixed(1)} ms`);
  const verity = {
    ...db,
    clientP50: percentile(client, 50),
    clientP99: percentile(client, 99),
    anatomy: await anatomy(pool, ids),
  };
  if (!peer) return { verity, peer: null };
  peerClient.sort((a, b) => a - b);
  const peerDb = await peerLatencies(peer, { workflowIds: peerIds });
  note(`DBOS peer idle latency submit → settled: p50 ${peerDb.p50.toFixed(1)} ms, p99 ${peerDb.p99.toFixed(1)} ms`);
  return {
    verity,
    peer: { ...peerDb, clientP50: percentile(peerClient, 50), clientP99: percentile(peerClient, 99) },
  };
}

/**
 * The idle latency taken apart: the median gap between each event and the one before it in the same execution,
 * per step, in the order the steps happen. Each gap is a job hop, a query round or a call to the provider.
 */
async function anatomy(pool: Pool, executionIds: string[]) {
  const { rows } = await pool.query<{ step: string; p50: number; n: string; at: number }>(
    `WITH ev AS (
       SELECT execution_id, seq, created_at,
              coalesce(from_status || ' → ', '') || coalesce(to_status, type) AS step,
              created_at - lag(created_at) OVER (PARTITION BY execution_id ORDER BY seq) AS gap
         FROM events WHERE execution_id = ANY($1)
     )
     SELECT step, percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM gap) * 1000) AS p50,
            count(*) AS n, avg(seq) AS at
       FROM ev WHERE gap IS NOT NULL GROUP BY step ORDER BY avg(seq)`,
    [executionIds],
  );
  return rows.map((r) => ({ step: r.step, p50: r.p50, n: Number(r.n) }));
}

/** Open loop at a steady rate (a fraction of the measured capacity): the latency an agent sees on a normal day. */
async function benchModerateLatency(pool: Pool, agent: Verity, rate: number, seconds: number) {
  const ids: string[] = [];
  const begin = Date.now();
  const inFlight: Promise<void>[] = [];
  for (let i = 0; i < rate * seconds; i += 1) {
    const due = begin + (i * 1000) / rate;
    if (due > Date.now()) await sleep(due - Date.now());
    inFlight.push(
      agent.executions.create(submission(`bench-moderate-${begin}-${i}`)).then(
        (e) => void ids.push(e.id),
        () => undefined,
      ),
    );
  }
  await Promise.all(inFlight);
  await waitUntilSettled(pool);
  const db = await latencies(pool, { executionIds: ids });
  note(`latency at ${rate}/s: p50 ${db.p50.toFixed(1)} ms, p99 ${db.p99.toFixed(1)} ms`);
  return { rate, ...db };
}

// ---------------------------------------------------------------------------------------------------------------
// The peer: a DBOS Transact workflow doing the same job (dbos-peer.ts), driven by the same closed loop

/** Its own database in the same private Postgres server; DBOS creates its `dbos` schema there on launch. */
const PEER_DATABASE = 'dbos_peer';
const PEER_UNSETTLED = `SELECT count(*) AS n FROM dbos.workflow_status WHERE status IN ('PENDING', 'ENQUEUED')`;

interface Peer {
  url: string;
  pid: number | null;
  /** On the peer's database: the loop's polls and the measurements (pg_stat_database counts per database). */
  pool: Pool;
  rssMax: number;
  stop(): Promise<void>;
}

/** How the apps reached Postgres and Redis, from the URLs they were given (not from the option asked for). */
function transportLine(cluster: Cluster, withPeer: boolean): string {
  const overSocket = (url: string | undefined) =>
    url?.startsWith('unix:') || url?.includes('?host=%2F') ? 'Unix socket' : 'TCP';
  const who = withPeer ? 'the apps and the DBOS peer reach' : 'the apps reach';
  return `${who} Postgres over ${overSocket(cluster.env.DATABASE_URL)}, Redis over ${overSocket(cluster.env.REDIS_URL)}; the bench's own connections use TCP`;
}

async function startPeer(cluster: Cluster, pool: Pool, unixSockets: boolean): Promise<Peer> {
  await pool.query(`CREATE DATABASE ${PEER_DATABASE}`);
  // The peer connects as Verity's apps do (TCP, or the Unix socket with --unix-sockets); the bench's own pools use TCP.
  const url = new URL(unixSockets ? cluster.env.DATABASE_URL : cluster.postgres.url);
  url.pathname = `/${PEER_DATABASE}`;
  const port = String(await freePort());
  // Verity's configuration (sandbox URL, connector timeout, settle window, read backoff) and its workers' node flags
  // (the peer runs intake and execution in one process; it was measured with 16 MB semi-spaces, the workers' size).
  const helper = await startHelper(
    'dbos-peer',
    'dbos peer listening',
    { ...cluster.env, DBOS_SYSTEM_DATABASE_URL: url.toString(), PORT: port },
    [...appNodeArgs('dispatcher'), ...cluster.nodeArgs],
  );
  const tcp = new URL(cluster.postgres.url);
  tcp.pathname = `/${PEER_DATABASE}`;
  const peerPool = new Pool({ connectionString: tcp.toString(), max: 4 });
  peerPool.on('error', () => undefined);
  let stopped = false;
  const peer: Peer = {
    url: `http://127.0.0.1:${port}`,
    pid: helper.child.pid ?? null,
    pool: peerPool,
    rssMax: 0,
    stop: async () => {
      if (stopped) return;
      stopped = true;
      clearInterval(sampler);
      await peerPool.end().catch(() => undefined);
      await helper.stop();
    },
  };
  const sampler = setInterval(() => (peer.rssMax = Math.max(peer.rssMax, rssOf(peer.pid) ?? 0)), 250);
  return peer;
}

async function submitToPeer(
  peer: Peer,
  reference: string,
  wait = false,
): Promise<{ id: string; outcome?: PeerOutcome }> {
  const { params } = submission(reference).operations[0];
  const res = await fetch(`${peer.url}/charges`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...params, wait }),
  });
  if (res.status !== (wait ? 200 : 201)) throw new Error(`peer answered ${res.status}: ${await res.text()}`);
  return (await res.json()) as { id: string; outcome?: PeerOutcome };
}

async function peerUnsettled(peer: Peer): Promise<number> {
  const { rows } = await peer.pool.query<{ n: string }>(PEER_UNSETTLED);
  return Number(rows[0].n);
}

/** Workflows that ended SUCCESS, with created → completed from Postgres' clock (both DBOS stamps are `now()`). */
async function peerLatencies(peer: Peer, window: { from: Date; to: Date } | { workflowIds: string[] }) {
  const byIds = 'workflowIds' in window;
  const { rows } = await peer.pool.query<{ ms: string }>(
    `SELECT completed_at - created_at AS ms FROM dbos.workflow_status
      WHERE status = 'SUCCESS' AND ${byIds ? 'workflow_uuid = ANY($1)' : 'completed_at >= $1 AND completed_at < $2'}`,
    byIds ? [window.workflowIds] : [window.from.getTime(), window.to.getTime()],
  );
  const ms = rows.map((r) => Number(r.ms)).sort((a, b) => a - b);
  return { count: ms.length, p50: percentile(ms, 50), p99: percentile(ms, 99) };
}

/** One round of the same closed loop as benchEndToEnd: `inflight` workflows open, a poll every 100 ms. */
async function benchPeerRound(cluster: Cluster, peer: Peer, options: BenchOptions, round: number) {
  const loop = new ClosedLoop(options.inflight, (n) => submitToPeer(peer, `dbos-r${round}-${n}`));
  const extra = { 'dbos peer': peer.pid };
  const measureFrom = Date.now() + options.warmupSeconds * 1000;
  const end = measureFrom + options.e2eSeconds * 1000;
  let window: { from: Date; cpu: ReturnType<typeof cpuSnapshot>; commits: number } | null = null;
  let polls = 0;
  while (Date.now() < end) {
    const open = await peerUnsettled(peer);
    if (window) polls += 1;
    loop.top(open);
    if (!window && Date.now() >= measureFrom) {
      window = { from: new Date(), cpu: cpuSnapshot(cluster, extra), commits: await pgCommits(peer.pool) };
      polls = 0;
    }
    await sleep(100);
  }
  if (!window) throw new Error('the measurement window never opened');
  const to = new Date();
  const cpu = cpuBetween(window.cpu, cpuSnapshot(cluster, extra));
  // The window's own reads on this database: every poll and the first commit count, each a transaction.
  const commits = (await pgCommits(peer.pool)) - window.commits - polls - 1;
  await loop.drained();
  const deadline = Date.now() + 180_000;
  while ((await peerUnsettled(peer)) > 0) {
    if (Date.now() > deadline) throw new Error('the peer did not settle its workflows');
    await sleep(100);
  }
  const inWindow = await peerLatencies(peer, { from: window.from, to });
  const seconds = (to.getTime() - window.from.getTime()) / 1000;
  const perOp = (n: number) => n / Math.max(1, inWindow.count);
  const cpuPerOp: Record<string, number> = {};
  for (const [label, ms] of Object.entries(cpu.byLabel)) cpuPerOp[label] = perOp(ms);
  const result = {
    verifiedPerSecond: inWindow.count / seconds,
    p50: inWindow.p50,
    p99: inWindow.p99,
    commitsPerOp: perOp(commits),
    cpuPerOp,
    otherLoad: cpu.otherMs / cpu.elapsedMs,
    submitted: loop.submitted - loop.failures,
    failures: loop.failures,
  };
  note(
    `DBOS peer round ${round}: ${result.verifiedPerSecond.toFixed(1)} workflows settled/s ` +
      `(p50 ${result.p50.toFixed(0)} ms), ${result.commitsPerOp.toFixed(1)} transactions/op`,
  );
  return result;
}

async function peerOutcomes(peer: Peer): Promise<Record<string, number>> {
  const res = await fetch(`${peer.url}/stats`);
  return ((await res.json()) as { outcomes: Record<string, number> }).outcomes;
}

/**
 * The provider's ground truth for the operations of one round (their references share a prefix): one charge per
 * operation, none charged twice.
 */
function crossCheck(effects: SandboxEffects, prefix: string, operations: number) {
  const references = Object.entries(effects.charges).filter(([reference]) => reference.startsWith(prefix));
  const charges = references.reduce((n, [, c]) => n + c.count, 0);
  const duplicates = effects.duplicates.filter((d) => d.key.startsWith(prefix)).length;
  const ok = effects.dropped === 0 && references.length === operations && charges === operations && duplicates === 0;
  return { prefix, operations, charges, duplicates, ok };
}

// ---------------------------------------------------------------------------------------------------------------
// Helper processes

async function startHelper(
  name: string,
  marker: string,
  env: Record<string, string>,
  nodeArgs: readonly string[] = [],
) {
  const child: ChildProcess = spawn(
    process.execPath,
    [`--title=verity-bench-${name}`, ...nodeArgs, path.join(DIST, 'test', 'bench', `${name}.js`)],
    { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  child.stdout?.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr?.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const deadline = Date.now() + 30_000;
  while (!output.includes(marker)) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`${name} did not start:\n${output}`);
    await sleep(50);
  }
  return {
    child,
    url: `http://127.0.0.1:${env.PORT}/`,
    stop: async () => {
      if (child.exitCode !== null) return;
      child.kill('SIGTERM');
      if (!(await within(exited, 10_000))) child.kill('SIGKILL');
    },
  };
}

// ---------------------------------------------------------------------------------------------------------------

function mb(bytes: number | undefined): string {
  return bytes === undefined ? '–' : `${(bytes / 1024 ** 2).toFixed(0)} MB`;
}

function pct(ratio: number): string {
  return `${(ratio * 100).toFixed(0)}%`;
}

function breakdown(perOp: Record<string, number>): string {
  return Object.entries(perOp)
    .filter(([, ms]) => ms >= 0.05)
    .sort((a, b) => b[1] - a[1])
    .map(([label, ms]) => `${label} ${ms.toFixed(2)}`)
    .join(', ');
}

/** The BENCH_APP_ overrides of this run, if any, for the table's header. */
function appSettingsLine(): string {
  const overrides = Object.entries(BENCH_TIMINGS).filter(([name]) => process.env[`BENCH_APP_${name}`] !== undefined);
  return overrides.length === 0 ? '' : `app settings: ${overrides.map(([k, v]) => `${k}=${v}`).join(', ')}\n`;
}

class UsageError extends Error {}

const USAGE = [
  'usage: npm run bench -- [options]',
  '  --quick               shorter phases, for a smoke test',
  '  --profile             CPU profiles of every app (node --cpu-prof), summarised at the end; keeps the logs',
  "  --keep                keep the private cluster's data and logs",
  '  --unix-sockets        the apps and the DBOS peer talk to Postgres and Redis over Unix sockets, not TCP',
  ...Object.entries(DEFAULTS)
    .filter(([, v]) => typeof v === 'number')
    .map(([k, v]) => `  --${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`).padEnd(20)} (default ${String(v)})`),
].join('\n');

function parseArgs(argv: string[]): BenchOptions {
  const options = { ...DEFAULTS };
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i];
    if (arg === '--help' || arg === '-h') {
      process.stdout.write(`${USAGE}\n`);
      process.exit(0);
    }
    if (arg === '--quick') {
      Object.assign(options, { intakeSeconds: 5, rounds: 1, e2eSeconds: 8, ceilingJobs: 3000, peerRounds: 1 });
    } else if (arg === '--keep') options.keep = true;
    else if (arg === '--profile') Object.assign(options, { profile: true, keep: true });
    else if (arg === '--unix-sockets') options.unixSockets = true;
    else {
      const match = /^--([a-z0-9-]+)(?:=(.*))?$/.exec(arg);
      const key = match?.[1].replace(/-([a-z])/g, (_, c: string) => c.toUpperCase()) as keyof BenchOptions | undefined;
      if (!match || !key || !(key in DEFAULTS) || typeof DEFAULTS[key] !== 'number') {
        throw new UsageError(`unknown option ${arg}\n${USAGE}`);
      }
      const value = Number(match[2] ?? argv[++i]);
      if (!Number.isFinite(value)) throw new UsageError(`${arg} needs a number\n${USAGE}`);
      (options as unknown as Record<string, number>)[key] = value;
    }
  }
  return options;
}

async function main(): Promise<void> {
  const options = parseArgs(process.argv.slice(2));
  const machine = machineDescription();
  const loadAtStart = loadAverage();
  note(`machine: ${machine}; load average at start ${loadAtStart}`);
  const profileDir = options.profile ? fs.mkdtempSync(path.join(os.tmpdir(), 'verity-profiles-')) : null;
  const cluster = await Cluster.start({
    dispatchers: 0,
    reconcilers: 0,
    timings: BENCH_TIMINGS,
    // Counts every statement by shape, so "N queries per operation" is measured, not estimated.
    postgresSettings: { shared_preload_libraries: 'pg_stat_statements' },
    unixSockets: options.unixSockets,
    nodeArgs: profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [],
    log: note,
  });
  const pool = new Pool({ connectionString: cluster.postgres.url, max: 4 });
  pool.on('error', () => undefined);
  const agent = new Verity({ baseUrl: cluster.apiUrl, apiKey: AGENT_KEY });
  await pool.query(`CREATE EXTENSION IF NOT EXISTS pg_stat_statements`).catch(() => undefined);
  const versions = (await pool.query<{ v: string }>(`SELECT current_setting('server_version') AS v`)).rows[0].v;
  let peer: Peer | null = null;
  try {
    if (process.env.BENCH_ONLY === 'idle') {
      peer = await benchIdleOnly(cluster, pool, agent, options);
      return;
    }
    await sleep(2_000);
    // Idle = booted and not yet loaded: the API and the sandbox now, the workers right after they start (the API has
    // served the intake rounds by then, so it is not sampled again).
    const idleRss = new RssSampler(cluster);
    idleRss.sample();
    const idleRssAtBoot = { ...idleRss.max };

    note('intake: baseline and Verity, interleaved, workers stopped');
    const loadRss = new RssSampler(cluster).start();
    const intake = await benchIntake(cluster, pool, options);
    // The intake rounds left thousands of executions nobody will run: start the pipeline phases from empty.
    await resetData(cluster, pool);

    note('ceiling: bare BullMQ jobs, one CAS + event transaction each');
    const ceiling1 = await benchCeiling(cluster, pool, 1, options.ceilingJobs);
    const ceiling3 = await benchCeiling(cluster, pool, 3, options.ceilingJobs);

    await cluster.scaleTo('reconciler', 1);
    await cluster.scaleTo('dispatcher', 1);
    await sleep(3_000);
    idleRss.sample();

    const e2e1 = await benchEndToEnd(cluster, pool, agent, options, 'd1');
    // The peer's rounds are interleaved with Verity's, so a neighbour's burst of load does not land on one side only.
    peer = options.peerRounds > 0 ? await startPeer(cluster, pool, options.unixSockets) : null;
    const peerRounds: Awaited<ReturnType<typeof benchPeerRound>>[] = [];
    if (peer) {
      note(`DBOS peer: ${options.peerRounds} round(s), between Verity's`);
      await sleep(2_000);
      peerRounds.push(await benchPeerRound(cluster, peer, options, 1));
    }
    await cluster.scaleTo('dispatcher', 3);
    await sleep(2_000);
    const e2e3 = await benchEndToEnd(cluster, pool, agent, options, 'd3');
    await cluster.scaleTo('dispatcher', 1);
    await sleep(2_000);
    for (let round = 2; peer && round <= options.peerRounds; round += 1) {
      peerRounds.push(await benchPeerRound(cluster, peer, options, round));
    }
    const rssUnderLoad = loadRss.stop();

    const { verity: idle, peer: peerIdle } = await benchIdleLatency(
      pool,
      agent,
      options.idleSamples,
      peer ?? undefined,
    );
    const outcomes = peer ? await peerOutcomes(peer) : null;
    await peer?.stop();
    const moderateRate = Math.max(2, Math.round(e2e1.verifiedPerSecond * 0.5));
    const moderate = await benchModerateLatency(pool, agent, moderateRate, options.moderateSeconds);
    const idleRssMax = { ...idleRss.max, ...idleRssAtBoot };

    // Every round checked at the provider (its ground truth), like the chaos run does: one charge per operation.
    const effects = await cluster.effects();
    const checks = [
      crossCheck(effects, 'bench-d1-', e2e1.created),
      crossCheck(effects, 'bench-d3-', e2e3.created),
      ...peerRounds.map((r, i) => crossCheck(effects, `dbos-r${i + 1}-`, r.submitted)),
    ];
    const { rows: statuses } = await pool.query<{ status: string; n: string }>(
      `SELECT status, count(*) AS n FROM operations GROUP BY status ORDER BY status`,
    );
    const peerSettled = peerRounds.reduce((n, r) => n + r.submitted, 0) + (peerIdle ? options.idleSamples : 0);
    const allVerified =
      statuses.every((r) => r.status === 'VERIFIED') &&
      (!outcomes || (outcomes.VERIFIED === peerSettled && Object.keys(outcomes).length === 1));
    if (!allVerified || checks.some((c) => !c.ok)) process.exitCode = 1;

    const intakeRatio = intake.verity.requestsPerSecond / intake.baseline.requestsPerSecond;
    const e2eRatio1 = e2e1.verifiedPerSecond / ceiling1.jobsPerSecond;
    const e2eRatio3 = e2e3.verifiedPerSecond / ceiling3.jobsPerSecond;
    const verdict = (ok: boolean) => (ok ? 'met' : 'MISSED');
    const rows: [string, string, string, string, string][] = [
      ['', 'Verity', 'same-run baseline', 'ratio', 'target'],
      [
        `intake POST /v1/executions, ${CONNECTIONS} connections`,
        `${intake.verity.requestsPerSecond.toFixed(0)} req/s`,
        `${intake.baseline.requestsPerSecond.toFixed(0)} req/s (node:http + 1 INSERT)`,
        pct(intakeRatio),
        `≥ 40%: ${verdict(intakeRatio >= 0.4)}`,
      ],
      [
        '  latency p50 / p99',
        `${intake.verity.p50.toFixed(0)} / ${intake.verity.p99.toFixed(0)} ms`,
        `${intake.baseline.p50.toFixed(0)} / ${intake.baseline.p99.toFixed(0)} ms`,
        '',
        '',
      ],
      [
        'end-to-end VERIFIED/s, 1 dispatcher',
        `${e2e1.verifiedPerSecond.toFixed(1)} ops/s`,
        `${ceiling1.jobsPerSecond.toFixed(0)} jobs/s (1 BullMQ worker, 1 CAS+event tx/job)`,
        pct(e2eRatio1),
        `≥ 30%: ${verdict(e2eRatio1 >= 0.3)}`,
      ],
      [
        'end-to-end VERIFIED/s, 3 dispatchers',
        `${e2e3.verifiedPerSecond.toFixed(1)} ops/s`,
        `${ceiling3.jobsPerSecond.toFixed(0)} jobs/s (3 BullMQ workers)`,
        pct(e2eRatio3),
        `≥ 30%: ${verdict(e2eRatio3 >= 0.3)}`,
      ],
      [
        'intake → VERIFIED, idle, p50 / p99',
        `${idle.p50.toFixed(1)} / ${idle.p99.toFixed(1)} ms`,
        `(SDK submit → settled: ${idle.clientP50.toFixed(0)} / ${idle.clientP99.toFixed(0)} ms)`,
        '',
        `p50 ≤ 50 ms: ${verdict(idle.p50 <= 50)}`,
      ],
      [
        `intake → VERIFIED at ${moderate.rate}/s, p50 / p99`,
        `${moderate.p50.toFixed(0)} / ${moderate.p99.toFixed(0)} ms`,
        `(${moderate.count} operations)`,
        '',
        '',
      ],
      [
        `  (closed loop, ${options.inflight} open) p50 / p99`,
        `${e2e1.p50.toFixed(0)} / ${e2e1.p99.toFixed(0)} ms (1 d.)`,
        `${e2e3.p50.toFixed(0)} / ${e2e3.p99.toFixed(0)} ms (3 d.)`,
        '',
        '',
      ],
    ];
    for (const app of ['api', 'dispatcher', 'reconciler', 'sandbox-provider']) {
      const under = rssUnderLoad[app];
      rows.push([
        `RSS ${app} idle / under load`,
        `${mb(idleRssMax[app])} / ${mb(under)}`,
        '',
        '',
        `≤ 200 MB: ${verdict((under ?? 0) <= 200 * 1024 ** 2)}`,
      ]);
    }
    const versus =
      peerRounds.length > 0 && peerIdle
        ? peerComparison(e2e1, idle, peerRounds, peerIdle, peer, options.inflight)
        : null;
    if (versus) rows.push(['', '', '', '', ''], ...versus.rows);
    const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)));
    const table = rows
      .map((r) =>
        r
          .map((cell, c) => cell.padEnd(widths[c]))
          .join('  ')
          .trimEnd(),
      )
      .join('\n');
    const steps = idle.anatomy
      .filter((a) => a.n >= options.idleSamples / 2)
      .map((a) => `${a.step} ${a.p50.toFixed(1)}`)
      .join(', ');
    const statementTable = [
      '  statements per VERIFIED op, end-to-end with 1 dispatcher (pg_stat_statements, most frequent first):',
      ...e2e1.statements.map(
        (st) =>
          `    ${st.perOp.toFixed(2).padStart(6)}  ${st.meanMs.toFixed(2).padStart(6)} ms  ${st.query.slice(0, 110)}`,
      ),
    ].join('\n');
    const profile = [
      `idle intake → VERIFIED, median ms per step: ${steps}`,
      'where the time goes (CPU ms per unit of work, per process kind):',
      `  intake, per request:    Verity: ${breakdown(intake.verity.cpuPerRequest)}`,
      `                          baseline: ${breakdown(intake.baseline.cpuPerRequest)}`,
      `  end-to-end, per VERIFIED op (1 dispatcher): ${breakdown(e2e1.cpuPerOp)}`,
      `  end-to-end, per VERIFIED op (3 dispatchers): ${breakdown(e2e3.cpuPerOp)}`,
      `  ceiling, per job (1 worker): ${breakdown(perUnit(ceiling1.cpu, options.ceilingJobs))}`,
      `  Postgres transactions (reads included) per VERIFIED op: ${e2e1.commitsPerOp.toFixed(1)} (1 d.), ` +
        `${e2e3.commitsPerOp.toFixed(1)} (3 d.); events written per op: ${e2e1.eventsPerOp.toFixed(1)}; ` +
        `Redis commands per op: ${e2e1.redisCommandsPerOp.toFixed(0)} / ${e2e3.redisCommandsPerOp.toFixed(0)}`,
      `  other load on the machine (not this benchmark), in cores: intake ${intake.verity.otherLoad.toFixed(2)}, ` +
        `ceiling ${ceiling1.otherLoad.toFixed(2)}/${ceiling3.otherLoad.toFixed(2)}, ` +
        `end-to-end ${e2e1.otherLoad.toFixed(2)}/${e2e3.otherLoad.toFixed(2)}`,
      `  provider cross-check (charges per round, duplicates): ` +
        checks.map((c) => `${c.prefix}* ${c.operations} ops → ${c.charges} charges, ${c.duplicates} dup.`).join('; ') +
        `; effects dropped ${effects.dropped} — ${checks.every((c) => c.ok) ? 'one charge per operation' : 'MISMATCH'}`,
      `  settled: Verity operations ${statuses.map((r) => `${r.status} ${r.n}`).join(', ')}` +
        (outcomes
          ? `; DBOS workflows (${peerSettled}) ${Object.entries(outcomes)
              .map(([k, n]) => `${k} ${n}`)
              .join(', ')}`
          : '') +
        (allVerified ? '' : ' — NOT ALL VERIFIED'),
      ...(versus ? versus.lines : []),
      `  intake rounds (req/s): Verity ${intake.verity.rounds.map((n) => n.toFixed(0)).join(', ')}; ` +
        `baseline ${intake.baseline.rounds.map((n) => n.toFixed(0)).join(', ')}; ` +
        `non-2xx/errors: Verity ${intake.verity.non2xx}, baseline ${intake.baseline.non2xx}; ` +
        `e2e submit failures ${e2e1.failures + e2e3.failures}`,
    ].join('\n');
    const header =
      `Verity benchmark, ${new Date().toISOString()}\n` +
      `machine: ${machine}; PostgreSQL ${versions}; load average at start ${loadAtStart}, at end ${loadAverage()}\n` +
      `${transportLine(cluster, peer !== null)}\n` +
      appSettingsLine();
    process.stdout.write(`\n${header}\n${table}\n\n${profile}\n\n${statementTable}\n`);
  } finally {
    await peer?.stop().catch(() => undefined);
    await pool.end().catch(() => undefined);
    await cluster.stop();
    if (!options.keep) cluster.remove();
    else process.stdout.write(`\nlogs in ${cluster.dir}\n`);
    if (profileDir) {
      const files = fs.readdirSync(profileDir).filter((f) => f.endsWith('.cpuprofile'));
      for (const app of ['api', 'dispatcher', 'reconciler', 'sandbox-provider']) {
        const pids = new Set(cluster.started.filter((s) => s.app === app).map((s) => String(s.pid)));
        const mine = files.filter((f) => pids.has(f.split('.')[3])).map((f) => path.join(profileDir, f));
        if (mine.length) process.stdout.write(`\n== CPU profile: ${app}\n${summarise(mine, 20)}\n`);
      }
      const peerProfile = files
        .filter((f) => f.split('.')[3] === String(peer?.pid))
        .map((f) => path.join(profileDir, f));
      if (peerProfile.length) process.stdout.write(`\n== CPU profile: dbos peer\n${summarise(peerProfile, 20)}\n`);
      process.stdout.write(`\nCPU profiles in ${profileDir}\n`);
    }
  }
}

/**
 * `BENCH_ONLY=idle npm run bench`: only the idle latency, Verity's samples alternating with the DBOS peer's as in the
 * full run (without the peer with --peer-rounds 0), on the same cluster (1 dispatcher, 1 reconciler): a before/after
 * of a change to the idle path in a minute rather than five. Returns the peer, for the caller to stop.
 */
async function benchIdleOnly(cluster: Cluster, pool: Pool, agent: Verity, options: BenchOptions) {
  await cluster.scaleTo('reconciler', 1);
  await cluster.scaleTo('dispatcher', 1);
  const peer = options.peerRounds > 0 ? await startPeer(cluster, pool, options.unixSockets) : null;
  try {
    await measureIdleOnly(cluster, pool, agent, options, peer);
  } catch (error) {
    await peer?.stop().catch(() => undefined);
    throw error;
  }
  return peer;
}

async function measureIdleOnly(cluster: Cluster, pool: Pool, agent: Verity, options: BenchOptions, peer: Peer | null) {
  await sleep(3_000);
  // A few unmeasured submissions first, as the full run's idle phase comes after the load phases: connections
  // opened, statements prepared, code compiled.
  const wait: IdleWait = process.env.BENCH_IDLE_WAIT === 'poll' ? 'poll' : 'sdk';
  const warm = Math.min(10, options.idleSamples);
  await benchIdleLatency(pool, agent, warm, peer ?? undefined, wait);
  const { verity: idle, peer: peerIdle } = await benchIdleLatency(
    pool,
    agent,
    options.idleSamples,
    peer ?? undefined,
    wait,
  );
  const steps = idle.anatomy
    .filter((a) => a.n >= options.idleSamples / 2)
    .map((a) => `${a.step} ${a.p50.toFixed(1)}`)
    .join(', ');
  const lines = [
    `Verity benchmark, idle latency only (BENCH_ONLY=idle), ${new Date().toISOString()}`,
    `machine: ${machineDescription()}; load average at end ${loadAverage()}`,
    `${transportLine(cluster, peer !== null)}`,
    appSettingsLine().trimEnd(),
    wait === 'poll' ? 'the client waits by polling Postgres (BENCH_IDLE_WAIT=poll), not with the SDK' : '',
    `intake → VERIFIED, idle, p50 / p99: ${idle.p50.toFixed(1)} / ${idle.p99.toFixed(1)} ms ` +
      `(${wait === 'sdk' ? 'SDK submit → settled' : 'client submit → completed seen'}: ` +
      `${idle.clientP50.toFixed(0)} / ${idle.clientP99.toFixed(0)} ms; ${idle.count} samples)`,
    ...(peerIdle
      ? [
          `DBOS peer submit → settled, idle, p50 / p99: ${peerIdle.p50.toFixed(1)} / ${peerIdle.p99.toFixed(1)} ms ` +
            `(client ${peerIdle.clientP50.toFixed(0)} ms)`,
          `idle submit → VERIFIED p50, Verity / DBOS: ${(idle.p50 / peerIdle.p50).toFixed(2)}× ` +
            `(≤ 1.5×: ${idle.p50 <= peerIdle.p50 * 1.5 ? 'met' : 'MISSED'})`,
        ]
      : []),
    `idle intake → VERIFIED, median ms per step: ${steps}`,
  ].filter((line) => line !== '');
  process.stdout.write(`\n${lines.join('\n')}\n`);
}

/** What a deployment of each system runs, without the load client and the sandbox provider. */
const VERITY_OWN = ['api', 'dispatcher', 'reconciler', 'postgres', 'redis'];
const PEER_OWN = ['dbos peer', 'postgres'];

function dbosVersion(): string {
  const manifest = path.join(path.dirname(require.resolve('@dbos-inc/dbos-sdk')), '..', '..', 'package.json');
  return (JSON.parse(fs.readFileSync(manifest, 'utf8')) as { version: string }).version;
}

/** Verity (1 dispatcher) against the DBOS peer, each figure the same measurement of both in the same run. */
function peerComparison(
  verity: { verifiedPerSecond: number; cpuPerOp: Record<string, number>; commitsPerOp: number },
  idle: { p50: number; clientP50: number },
  rounds: Awaited<ReturnType<typeof benchPeerRound>>[],
  peerIdle: { p50: number; clientP50: number },
  peer: Peer | null,
  inflight: number,
) {
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  const own = (perOp: Record<string, number>, labels: string[]) => labels.reduce((n, l) => n + (perOp[l] ?? 0), 0);
  const cpuPerOp: Record<string, number> = {};
  for (const r of rounds) {
    for (const [label, ms] of Object.entries(r.cpuPerOp)) cpuPerOp[label] = (cpuPerOp[label] ?? 0) + ms / rounds.length;
  }
  const dbos = {
    perSecond: mean(rounds.map((r) => r.verifiedPerSecond)),
    cpu: own(cpuPerOp, PEER_OWN),
    commits: mean(rounds.map((r) => r.commitsPerOp)),
  };
  const verityCpu = own(verity.cpuPerOp, VERITY_OWN);
  const times = (a: number, b: number) => (b > 0 ? `${(a / b).toFixed(2)}×` : '–');
  const verdict = (ok: boolean) => (ok ? 'met' : 'MISSED');
  const rows: [string, string, string, string, string][] = [
    ['', 'Verity, 1 dispatcher', `DBOS Transact ${dbosVersion()} peer, same run`, 'Verity / DBOS', 'target'],
    [
      `VERIFIED/s, ${inflight} in flight`,
      `${verity.verifiedPerSecond.toFixed(1)} ops/s`,
      `${dbos.perSecond.toFixed(1)} workflows/s (rounds ${rounds.map((r) => r.verifiedPerSecond.toFixed(0)).join(', ')})`,
      times(verity.verifiedPerSecond, dbos.perSecond),
      `≥ 1.0×: ${verdict(verity.verifiedPerSecond >= dbos.perSecond)}`,
    ],
    [
      'CPU ms per op, own processes + Postgres',
      `${verityCpu.toFixed(2)}`,
      `${dbos.cpu.toFixed(2)}`,
      times(verityCpu, dbos.cpu),
      '',
    ],
    [
      'Postgres transactions per op',
      verity.commitsPerOp.toFixed(1),
      dbos.commits.toFixed(1),
      times(verity.commitsPerOp, dbos.commits),
      '',
    ],
    [
      'idle submit → VERIFIED p50 (Postgres clock)',
      `${idle.p50.toFixed(1)} ms`,
      `${peerIdle.p50.toFixed(1)} ms`,
      times(idle.p50, peerIdle.p50),
      `≤ 1.5×: ${verdict(idle.p50 <= peerIdle.p50 * 1.5)}`,
    ],
    [
      '  client submit → settled p50',
      `${idle.clientP50.toFixed(0)} ms`,
      `${peerIdle.clientP50.toFixed(0)} ms`,
      times(idle.clientP50, peerIdle.clientP50),
      '',
    ],
    ['RSS dbos peer under load', '', mb(peer?.rssMax || undefined), '', ''],
  ];
  const lines = [
    `  DBOS peer, per settled workflow (mean of ${rounds.length} round(s)): ${breakdown(cpuPerOp)}`,
    `    own processes: Verity ${VERITY_OWN.join(' + ')}; DBOS ${PEER_OWN.join(' + ')}; ` +
      `closed loop p50 / p99 ${mean(rounds.map((r) => r.p50)).toFixed(0)} / ${mean(rounds.map((r) => r.p99)).toFixed(0)} ms; ` +
      `other load ${rounds.map((r) => r.otherLoad.toFixed(2)).join('/')} cores; submit failures ` +
      `${rounds.reduce((n, r) => n + r.failures, 0)}`,
  ];
  return { rows, lines };
}

function perUnit(cpu: CpuUse, units: number): Record<string, number> {
  return Object.fromEntries(Object.entries(cpu.byLabel).map(([label, ms]) => [label, ms / units]));
}

main().catch((error: unknown) => {
  if (error instanceof UsageError) {
    process.stderr.write(`${error.message}\n`);
    process.exit(2);
  }
  process.stderr.write(
    `benchmark failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exit(1);
});
