/**
 * The chaos run: a private deployment (cluster.ts), a seeded workload (workload.ts) submitted through the SDK while
 * the sandbox injects send faults and the harness SIGKILLs workers, pauses one past its lock, crashes Redis and
 * Postgres once each, crashes Redis once more and brings it back EMPTY, and enqueues stray dispatch jobs for operations
 * already SENT. Then it drains and checks every promise against the provider's ground truth (its effects and its wire
 * log) and the database (invariants.ts). Reported, never asserted on time: a slow machine makes a slow run, not a failed one.
 */
import * as fs from 'node:fs';
import { Pool } from 'pg';
import { Verity, VerityError } from '@verity/sdk';
import { createRedisClient, loadConfig } from '@verity/platform';
import { JobName, JobProducer, QueueShards } from '@verity/queues';
import { AppProcess, Cluster, sleep } from './cluster';
import { ChaosActions, InvariantReport, checkInvariants, drain, noChaosActions } from './invariants';
import { seededRandom } from '../support/seeded-random';
import { PlannedExecution, faultRules, planWorkload } from './workload';

export interface ChaosOptions {
  /** Operations to submit (executions are planned until this many operations). */
  operations: number;
  /** Worker SIGKILLs (dispatchers and reconcilers), each followed by a restart. */
  kills: number;
  /** Chance that one send meets a fault, split evenly between the five fault kinds. */
  faultProbability: number;
  seed: number;
  dispatchers: number;
  reconcilers: number;
  /** Submissions per second (the schedule of kills and restarts spans the same window). */
  rate: number;
  /** Submissions in flight at once. */
  concurrency: number;
  /** Below the settle window (1.5 s), so a lagging replica delays verification but never proves absence. */
  replicaLagMs: number;
  /** How long Redis and Postgres stay down when crashed. */
  outageMs: number;
  restartRedis: boolean;
  /** Crash Redis once more and start it with its data removed (every job, schedule and marker lost). */
  emptyRedis: boolean;
  restartPostgres: boolean;
  /**
   * Queues on a local three-node Redis Cluster with QUEUE_SHARDS=3 instead of one Redis server. The Redis crashes then
   * crash the node serving the home shard (the sweep schedule's): the other shards stay up, as on a real cluster.
   */
  redisCluster: boolean;
  /** Enqueue duplicate dispatch jobs for operations seen SENT, as a replayed or hand-made job would be. */
  strayJobs: boolean;
  pause: boolean;
  drainTimeoutMs: number;
  /** The drain gives up early when nothing settles for this long. */
  stallMs: number;
  /** Keep the working directory (data and logs) even when every invariant held. */
  keep: boolean;
  dir?: string;
  log: (line: string) => void;
}

export const DEFAULT_OPTIONS: ChaosOptions = {
  operations: 2000,
  kills: 20,
  faultProbability: 0.2,
  seed: 42,
  dispatchers: 3,
  reconcilers: 2,
  rate: 10,
  concurrency: 16,
  replicaLagMs: 300,
  outageMs: 2000,
  restartRedis: true,
  emptyRedis: true,
  restartPostgres: true,
  redisCluster: false,
  strayJobs: true,
  pause: true,
  drainTimeoutMs: 600_000,
  stallMs: 120_000,
  keep: false,
  log: (line) => process.stdout.write(`${line}\n`),
};

export interface ChaosResult {
  options: Omit<ChaosOptions, 'log'>;
  report: InvariantReport;
  actions: ChaosActions;
  dir: string;
  ok: boolean;
}

interface Accepted {
  planned: PlannedExecution;
  executionId: string;
  operationIds: string[];
}

export async function runChaos(partial: Partial<ChaosOptions> = {}): Promise<ChaosResult> {
  const options: ChaosOptions = { ...DEFAULT_OPTIONS, ...partial };
  const { log } = options;
  const started = Date.now();
  const stamp = () => `${((Date.now() - started) / 1000).toFixed(1).padStart(6)}s`;
  const note = (line: string) => log(`${stamp()}  ${line}`);
  const random = seededRandom(options.seed);
  const runId = `${options.seed}-${Date.now().toString(36)}`;
  const planned = planWorkload(options.operations, runId, random);

  note(`starting a private cluster: ${options.dispatchers} dispatchers, ${options.reconcilers} reconcilers`);
  const cluster = await Cluster.start({
    dir: options.dir,
    dispatchers: options.dispatchers,
    reconcilers: options.reconcilers,
    redisCluster: options.redisCluster,
    log: note,
  });
  const actions: ChaosActions = noChaosActions();
  const pool = new Pool({ connectionString: cluster.postgres.url, max: 4 });
  // Postgres is crashed on purpose: an idle client's error must not take the harness down.
  pool.on('error', () => undefined);
  const agent = new Verity({ baseUrl: cluster.apiUrl, apiKey: 'demo-agent-key', timeoutMs: 15_000 });
  const reviewer = new Verity({ baseUrl: cluster.apiUrl, apiKey: 'demo-reviewer-key', timeoutMs: 15_000 });
  let report: InvariantReport | undefined;
  let stopWatch = () => undefined as void;
  let reviewers: ReturnType<typeof runReviewers> | undefined;
  try {
    await cluster.setFaults(faultRules(options.faultProbability, options.replicaLagMs));
    stopWatch = watchUnexpectedExits(cluster, actions, note);
    reviewers = runReviewers(pool, reviewer, cluster, actions);

    const windowMs = Math.max(5_000, (planned.length / options.rate) * 1000);
    note(
      `submitting ${planned.length} executions (${options.operations} operations) over ~${(windowMs / 1000).toFixed(0)} s; ` +
        `fault probability ${options.faultProbability}, ${options.kills} kills`,
    );
    const chaos = runSchedule(cluster, options, windowMs, random, actions, note);
    const stray = options.strayJobs ? runStrayDispatches(pool, cluster, windowMs, actions) : Promise.resolve();
    const accepted: Accepted[] = [];
    const notAccepted: { planned: PlannedExecution; error: string }[] = [];
    await submitAll(agent, planned, options, accepted, notAccepted, actions);
    note(`submitted: ${accepted.length} accepted, ${notAccepted.length} not accepted`);
    await chaos;
    await stray;
    note(`chaos schedule done (${actions.strayDispatches} stray dispatch jobs); every worker running again`);
    await reviewers.stopResolving();

    const drained = await drain(
      pool,
      accepted.map((a) => a.executionId),
      options.drainTimeoutMs,
      note,
      options.stallMs,
    );
    await reviewers.stop();
    note(drained ? 'drained: everything settled' : 'the drain gave up: some accepted work never settled');
    actions.refusedStarts = cluster.apps.reduce((n, a) => n + a.failedStarts, 0);
    // Let in-flight moves that are not part of "settled" (e.g. a late CAS that loses) finish before reading.
    await sleep(1_000);
    report = await checkInvariants({
      pool,
      effects: await cluster.effects(),
      requests: await cluster.requests(),
      statusModel: await cluster.statusModel(),
      planned,
      accepted: accepted.map((a) => ({ executionId: a.executionId, planned: a.planned })),
      notAccepted,
      actions,
      options: { operations: options.operations, faultProbability: options.faultProbability, seed: options.seed },
    });
  } finally {
    stopWatch();
    await reviewers?.stop();
    await pool.end().catch(() => undefined);
    await cluster.stop();
  }
  const ok = report.violations === 0;
  const { log: _log, ...rest } = options;
  if (ok && !options.keep) cluster.remove();
  else fs.writeFileSync(`${cluster.dir}/report.txt`, report.table);
  return { options: rest, report, actions, dir: cluster.dir, ok };
}

/** Through the SDK, with the same Idempotency-Key on every try, as an agent that wants exactly one execution would. */
async function submitAll(
  agent: Verity,
  planned: PlannedExecution[],
  options: ChaosOptions,
  accepted: Accepted[],
  notAccepted: { planned: PlannedExecution; error: string }[],
  actions: ChaosActions,
): Promise<void> {
  const begin = Date.now();
  const inFlight = new Set<Promise<void>>();
  for (const [i, item] of planned.entries()) {
    const due = begin + (i / options.rate) * 1000;
    if (due > Date.now()) await sleep(due - Date.now());
    while (inFlight.size >= options.concurrency) await Promise.race(inFlight);
    const work = submitOne(agent, item, actions).then(
      (execution) => {
        accepted.push({
          planned: item,
          executionId: execution.id,
          operationIds: execution.operations.map((o) => o.id),
        });
      },
      (error: unknown) => {
        notAccepted.push({ planned: item, error: error instanceof Error ? error.message : String(error) });
      },
    );
    const tracked = work.finally(() => inFlight.delete(tracked));
    inFlight.add(tracked);
  }
  await Promise.all(inFlight);
}

async function submitOne(agent: Verity, item: PlannedExecution, actions: ChaosActions) {
  const giveUpAt = Date.now() + 90_000;
  for (;;) {
    try {
      return (await agent.executions.createWithMeta(item.body, { idempotencyKey: item.idempotencyKey })).execution;
    } catch (error) {
      // A 4xx other than "still in flight" is the harness's mistake, not an outage: retrying cannot help.
      const definitive =
        error instanceof VerityError && error.status < 500 && error.status !== 409 && error.status !== 429;
      if (definitive || Date.now() > giveUpAt) throw error;
      actions.submitRetries += 1;
      await sleep(500);
    }
  }
}

/** What one race of reviewers answered: `won` 2xx; the refusals by problem code; anything else (an outage). */
interface RaceTally {
  won: number;
  refused: Record<string, number>;
  other: number;
}

/** Fires every decision at once, as reviewers clicking together would, and counts the answers. */
async function raceDecisions(requests: (() => Promise<unknown>)[]): Promise<RaceTally> {
  const tally: RaceTally = { won: 0, refused: {}, other: 0 };
  const answers = await Promise.allSettled(requests.map((send) => send()));
  for (const answer of answers) {
    if (answer.status === 'fulfilled') tally.won += 1;
    else if (answer.reason instanceof VerityError && answer.reason.status === 409) {
      tally.refused[answer.reason.code] = (tally.refused[answer.reason.code] ?? 0) + 1;
    } else tally.other += 1;
  }
  return tally;
}

/**
 * Three reviewers who act at the same moment, racing each other and the workers (I13, I14):
 * - every approval request gets approve, approve and deny at once (so some approvals end denied);
 * - every MANUAL_REVIEW gets three resolutions at once: a never-sent hold SENT, CANCELLED and SENT; a sent one the
 *   truth as the provider's dashboard shows it (GET /__effects), except that a charge that exists also gets one
 *   "FAILED" from a reviewer who is wrong — which Verity must refuse (409 effect-exists) or lose to the others.
 * Exactly one decision of each race may be written. Resolutions stop before the drain (a release the drain did not
 * wait for would look unsettled); approvals go on until the run ends.
 */
function runReviewers(
  pool: Pool,
  reviewer: Verity,
  cluster: Cluster,
  actions: ChaosActions,
): { stopResolving: () => Promise<void>; stop: () => Promise<void> } {
  let approving = true;
  let resolving = true;
  const decidedOnce = (what: string, id: string, tally: RaceTally) => {
    if (tally.won > 1) actions.reviewers.wonTwice.push(`${what} ${id}: ${tally.won} reviewers answered 2xx`);
    for (const [code, n] of Object.entries(tally.refused)) {
      actions.reviewers.refusals[code] = (actions.reviewers.refusals[code] ?? 0) + n;
    }
  };
  const approvals = async () => {
    while (approving) {
      try {
        const { rows } = await pool.query<{ id: string }>(
          `SELECT id FROM operations
            WHERE status = 'PREPARED' AND requires_approval AND approval->>'state' = 'requested' LIMIT 200`,
        );
        for (const { id } of rows) {
          const reason = { reason: 'chaos reviewers' };
          const tally = await raceDecisions([
            () => reviewer.operations.approve(id, reason),
            () => reviewer.operations.deny(id, { reason: 'chaos reviewer says no' }),
            () => reviewer.operations.approve(id, reason),
          ]);
          actions.reviewers.approvalRaces += 1;
          if (tally.won > 0) actions.approvals += 1;
          decidedOnce('approval of', id, tally);
        }
      } catch {
        // Postgres is down: look again shortly.
      }
      await sleep(250);
    }
  };
  // A careful reviewer answers "it did not happen" only once no call of the operation can still reach the provider:
  // a dispatcher frozen between its "is the call still safe" check and the call (the SIGSTOP below) may send it seconds
  // after the operation was marked UNKNOWN, as may a send still in flight when a stray job marked it. Before then the
  // provider's dashboard is no evidence of absence, for a person as for the reconciler (which waits likewise).
  const lockMs = Number(cluster.env.DISPATCH_LOCK_MS);
  const graceMs = Number(cluster.env.SEND_GRACE_MS);
  const absenceEvidentAfterMs = 2 * (lockMs + graceMs) + Number(cluster.env.CONNECTOR_TIMEOUT_MS) + 1_500;
  const resolutions = async () => {
    while (resolving) {
      try {
        const { rows } = await pool.query<{
          id: string;
          attempt: number;
          connector: string;
          reference: string | null;
          client_ref: string | null;
          absence_evident: boolean;
        }>(
          `SELECT id, attempt, connector, params->>'reference' AS reference, params->>'client_ref' AS client_ref,
                  coalesce(sent_at < now() - make_interval(secs => $1::float8 / 1000), true) AS absence_evident
             FROM operations WHERE status = 'MANUAL_REVIEW' AND obligation->'resolution' IS NULL LIMIT 100`,
          [absenceEvidentAfterMs],
        );
        const effects = rows.length ? await cluster.effects() : null;
        for (const op of rows) {
          if (!resolving) break;
          let choices: string[];
          if (op.attempt === 0) choices = ['SENT', 'CANCELLED', 'SENT'];
          else {
            const happened =
              op.connector === 'sandbox.payments'
                ? (effects!.charges[op.reference ?? '']?.count ?? 0) > 0
                : (effects!.messages[op.client_ref ?? '']?.count ?? 0) > 0;
            if (!happened && !op.absence_evident) continue;
            if (!happened) choices = ['FAILED', 'FAILED', 'FAILED'];
            else if (op.connector === 'sandbox.payments') choices = ['VERIFIED', 'FAILED', 'VERIFIED'];
            else choices = ['VERIFIED', 'VERIFIED', 'VERIFIED'];
          }
          const tally = await raceDecisions(
            choices.map(
              (status) => () =>
                reviewer.operations.resolve(op.id, {
                  status: status as 'VERIFIED',
                  evidence: `chaos reviewer: the provider dashboard says ${status}`,
                }),
            ),
          );
          actions.reviewers.resolutionRaces += 1;
          decidedOnce('resolution of', op.id, tally);
        }
      } catch {
        // Postgres is down: look again shortly.
      }
      await sleep(250);
    }
  };
  const approving$ = approvals();
  const resolving$ = resolutions();
  return {
    stopResolving: async () => {
      resolving = false;
      await resolving$;
    },
    stop: async () => {
      approving = false;
      resolving = false;
      await Promise.all([approving$, resolving$]);
    },
  };
}

/**
 * Kills at random moments across the submission window; the pause, the Redis crash and the Postgres crash at set
 * points of it, so each happens while work is in flight.
 */
async function runSchedule(
  cluster: Cluster,
  options: ChaosOptions,
  windowMs: number,
  random: () => number,
  actions: ChaosActions,
  note: (line: string) => void,
): Promise<void> {
  const lockMs = Number(cluster.env.DISPATCH_LOCK_MS);
  const graceMs = Number(cluster.env.SEND_GRACE_MS);
  const tasks: Promise<void>[] = [];
  const at = (fraction: number, task: () => Promise<void>) => tasks.push(sleep(fraction * windowMs).then(task));

  for (let i = 0; i < options.kills; i += 1) {
    const when = 0.05 + random() * 0.9;
    const downMs = 300 + random() * 2_700;
    const pickValue = random();
    at(when, async () => {
      const candidates = () =>
        cluster.apps.filter((a) => (a.name === 'dispatcher' || a.name === 'reconciler') && a.alive && !a.paused);
      // Every worker may be down or paused at this instant: wait for one rather than skip a kill.
      for (let waited = 0; candidates().length === 0 && waited < 30_000; waited += 200) await sleep(200);
      const victims = candidates();
      if (victims.length === 0) return;
      const victim = victims[Math.floor(pickValue * victims.length)];
      await victim.kill('SIGKILL');
      actions.workerKills += 1;
      note(`SIGKILL ${victim.label}; restarting in ${(downMs / 1000).toFixed(1)} s`);
      await sleep(downMs);
      await restart(victim, note);
      actions.workerRestarts += 1;
    });
  }
  if (options.pause) {
    at(0.5, async () => {
      const victim = cluster.of('dispatcher').find((a) => a.alive && !a.paused);
      if (!victim) return;
      const pausedMs = lockMs + graceMs + 1_500;
      await victim.kill('SIGSTOP');
      note(`SIGSTOP ${victim.label} for ${(pausedMs / 1000).toFixed(1)} s (lock ${lockMs} ms)`);
      await sleep(pausedMs);
      await victim.kill('SIGCONT');
      actions.pauses.push({ app: victim.label, ms: pausedMs });
      note(`SIGCONT ${victim.label}`);
    });
  }
  if (options.restartRedis) {
    at(0.3, async () => {
      await cluster.redis.kill('SIGKILL');
      note(`Redis crashed (SIGKILL); down for ${options.outageMs} ms`);
      await sleep(options.outageMs);
      await cluster.redis.restart();
      actions.redisRestarts += 1;
      note('Redis restarted (append-only file replayed)');
    });
  }
  if (options.emptyRedis) {
    // Late in the window, clear of the other outages, so work is in flight and still arriving when Redis forgets it.
    at(0.85, async () => {
      note(`Redis crashed (SIGKILL) and its data removed; down for ${options.outageMs} ms`);
      await cluster.restartRedisEmpty(options.outageMs);
      actions.redisEmptied += 1;
      note('Redis restarted EMPTY (no jobs, no sweep schedule, no marker)');
    });
  }
  if (options.restartPostgres) {
    at(0.7, async () => {
      await cluster.postgres.kill('SIGKILL');
      note(`Postgres crashed (SIGKILL to the postmaster and every backend); down for ${options.outageMs} ms`);
      await sleep(options.outageMs);
      await cluster.postgres.restart();
      actions.postgresRestarts += 1;
      note('Postgres restarted (crash recovery done)');
    });
  }
  await Promise.all(tasks);
}

/**
 * A duplicated job (a replay from a dashboard, a retry of a lost acknowledgement, another process's bug) for an
 * operation that is already SENT: the dispatcher must mark it UNKNOWN and never call the connector again (I3). Every
 * few hundred milliseconds of the window the harness enqueues one for each operation it sees SENT (a send meeting
 * timeout_after_commit stays SENT for the connector timeout).
 */
async function runStrayDispatches(pool: Pool, cluster: Cluster, windowMs: number, actions: ChaosActions) {
  // Fail-fast, as the apps' producers are: while Redis is down an enqueue throws and the harness moves on.
  // On one Redis or on the cluster, with the apps' shards: the same client the apps' producers use.
  const config = loadConfig(cluster.env);
  const redis = createRedisClient(config, 'producer', 'chaos-stray-jobs');
  const producer = new JobProducer(redis, QueueShards.of(config));
  const until = Date.now() + windowMs;
  try {
    while (Date.now() < until) {
      try {
        const { rows } = await pool.query<{ id: string; execution_id: string }>(
          `SELECT id, execution_id FROM operations WHERE status = 'SENT' ORDER BY sent_at DESC LIMIT 5`,
        );
        for (const { id, execution_id: executionId } of rows) {
          await producer.enqueue(JobName.DISPATCH_OPERATION, { operationId: id, executionId });
          actions.strayDispatches += 1;
        }
      } catch {
        // Postgres or Redis is down: look again shortly.
      }
      await sleep(300);
    }
  } finally {
    await producer.close();
    redis.disconnect();
  }
}

async function restart(victim: AppProcess, note: (line: string) => void): Promise<void> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      await victim.start();
      return;
    } catch (error) {
      // Started while Redis or Postgres was down: the app refuses to boot; try again once they are back.
      if (attempt >= 10) throw error;
      note(`${victim.label} did not start (attempt ${attempt}); retrying`);
      await sleep(2_000);
    }
  }
}

/** The apps log a crash as one pino line ("crashing") with the stack; quote its first lines, else the log's tail. */
function crashCause(tail: string): string {
  for (const line of tail.split('\n').reverse()) {
    if (!line.includes('"crashing"')) continue;
    try {
      const entry = JSON.parse(line) as { err?: { stack?: string; message?: string }; origin?: string };
      const stack = (entry.err?.stack ?? entry.err?.message ?? '').split('\n').slice(0, 6).join(' | ');
      return `${entry.origin ?? 'crash'}: ${stack}`;
    } catch {
      break;
    }
  }
  return tail.split('\n').slice(-5).join(' ').replace(/\s+/g, ' ').slice(-300);
}

/** A process that dies without being told to is a finding: record it, and start it again so the run goes on. */
function watchUnexpectedExits(cluster: Cluster, actions: ChaosActions, note: (line: string) => void): () => void {
  let watching = true;
  const known = new Map<AppProcess, number>();
  const timer = setInterval(() => {
    if (!watching) return;
    for (const app of cluster.apps) {
      const exitedOnItsOwn = app.child && !app.alive && !app.exitExpected;
      if (!exitedOnItsOwn || known.get(app) === app.starts) continue;
      known.set(app, app.starts);
      const detail = `${app.label} exited by itself (code ${app.child?.exitCode}, signal ${app.child?.signalCode})`;
      actions.unexpectedExits.push(`${detail}: ${crashCause(app.tail(200))}`);
      note(`${detail}; restarting it`);
      restart(app, note).catch((error: unknown) => note(`${app.label} restart failed: ${String(error)}`));
    }
  }, 500);
  return () => {
    watching = false;
    clearInterval(timer);
  };
}
