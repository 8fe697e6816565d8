/**
 * Full-stack soak: N payment operations through the whole deployment — API, dispatcher, reconciler, sandbox
 * provider, Postgres, Redis, all private (test/chaos/cluster.ts) — with production timings, and every process'
 * memory sampled as it goes. The two targeted soaks (soak-exchange.ts, soak-sandbox.ts) measure the live heap of the
 * two places that leaked; this one asks the question a deployment asks: after hundreds of thousands of operations,
 * has any process grown?
 *
 *   npm run build && node dist/test/bench/soak-stack.js [--operations 500000] [--inflight 64] [--samples 20]
 *
 * A closed loop keeps `inflight` single-charge executions open (submitted through the SDK, like `npm run bench`).
 * At each sample: resident memory (VmRSS) of every app, Redis' `used_memory`, and how many operations are settled.
 * The apps run with their production heap limit (appNodeArgs: a 128 MB old space), so a leak shows as growth and then as a
 * process dying; the harness treats any exit it did not ask for as a failure. Verdict, per process: the largest RSS
 * of the second half of the run is within 10 % (at least 16 MB) of the largest of the first half after warm-up.
 * Exit code 0 only when every process is flat, none died, every operation settled VERIFIED and the provider saw no
 * reference charged twice.
 */
import { Pool } from 'pg';
import { Verity } from '@verity/sdk';
import { redisCommands } from '../../scripts/local-services';
import { Cluster, sleep } from '../chaos/cluster';

interface Options {
  operations: number;
  inflight: number;
  samples: number;
}

interface Sample {
  settled: number;
  seconds: number;
  rss: Record<string, number | null>;
  redisBytes: number;
}

const AGENT_KEY = 'demo-agent-key';
const APPS = ['api', 'dispatcher', 'reconciler', 'sandbox-provider'] as const;
const UNSETTLED = `status IN ('PREPARED','SENT','ACKNOWLEDGED','UNKNOWN','RECONCILING')`;

function parseOptions(argv: string[]): Options {
  const options: Options = { operations: 500_000, inflight: 64, samples: 20 };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '') as keyof Options;
    const value = Number(argv[i + 1]);
    if (!(key in options) || !Number.isInteger(value) || value <= 0) throw new Error(`bad option ${argv[i]}`);
    options[key] = value;
  }
  return options;
}

const started = Date.now();
const note = (line: string) =>
  process.stderr.write(`${((Date.now() - started) / 1000).toFixed(1).padStart(7)}s  ${line}\n`);
const mb = (bytes: number | null | undefined) => (bytes == null ? '—' : `${(bytes / 1024 ** 2).toFixed(1)} MB`);

async function redisUsedMemory(url: string): Promise<number> {
  const [info] = await redisCommands(url, [['INFO', 'memory']]);
  const match = /used_memory:(\d+)/.exec(String(info));
  return match ? Number(match[1]) : 0;
}

async function main(): Promise<void> {
  const options = parseOptions(process.argv.slice(2));
  const cluster = await Cluster.start({
    dispatchers: 1,
    reconcilers: 1,
    // Production windows (no test shortcuts); the rate limit lifted: one tenant is the whole load.
    timings: { RATE_LIMIT_PER_MINUTE: '100000000', LOG_LEVEL: 'info' },
    log: note,
  });
  const pool = new Pool({ connectionString: cluster.postgres.url, max: 2 });
  pool.on('error', () => undefined);
  const agent = new Verity({ baseUrl: cluster.apiUrl, apiKey: AGENT_KEY });
  const samples: Sample[] = [];
  let submitted = 0;
  let pending = 0;
  let failures = 0;
  const died: string[] = [];
  const submit = () => {
    submitted += 1;
    pending += 1;
    const reference = `soak-${submitted}`;
    agent.executions
      .create({
        agent_id: 'soak-agent',
        intent: 'soak charge',
        operations: [
          {
            key: 'charge',
            connector: 'sandbox.payments',
            action: 'charge',
            params: { amount: 1250, currency: 'EUR', reference },
          },
        ],
      })
      .catch(() => (failures += 1))
      .finally(() => (pending -= 1));
  };
  const unsettled = async () =>
    Number((await pool.query(`SELECT count(*) AS n FROM operations WHERE ${UNSETTLED}`)).rows[0].n);
  const settledCount = async () =>
    Number((await pool.query(`SELECT count(*) AS n FROM operations WHERE NOT (${UNSETTLED})`)).rows[0].n);
  const sample = async (): Promise<Sample> => {
    const rss: Record<string, number | null> = {};
    for (const name of APPS) {
      const app = cluster.apps.find((a) => a.name === name);
      rss[name] = app?.rssBytes() ?? null;
    }
    const taken = {
      settled: await settledCount(),
      seconds: (Date.now() - started) / 1000,
      rss,
      redisBytes: await redisUsedMemory(cluster.redis.url),
    };
    note(
      `${String(taken.settled).padStart(7)} settled  ` +
        APPS.map((a) => `${a} ${mb(rss[a])}`).join('  ') +
        `  redis ${mb(taken.redisBytes)}`,
    );
    return taken;
  };
  try {
    samples.push(await sample());
    const every = Math.max(1, Math.floor(options.operations / options.samples));
    let nextSample = every;
    let settled = 0;
    while (settled < options.operations) {
      for (const app of cluster.apps)
        if (!app.alive && !app.exitExpected && !died.includes(app.label)) died.push(app.label);
      if (died.length > 0) throw new Error(`process(es) died: ${died.join(', ')}`);
      const open = await unsettled();
      const room = Math.min(options.inflight - open - pending, options.operations - submitted);
      for (let i = 0; i < room; i += 1) submit();
      settled = submitted - pending - open - failures;
      if (settled >= nextSample) {
        samples.push(await sample());
        nextSample += every;
      }
      await sleep(100);
    }
    while (pending > 0 || (await unsettled()) > 0) await sleep(200);
    samples.push(await sample());

    const { rows: statuses } = await pool.query<{ status: string; n: string }>(
      `SELECT status, count(*) AS n FROM operations GROUP BY status ORDER BY status`,
    );
    const effects = await cluster.effects();
    const seconds = samples[samples.length - 1].seconds - samples[0].seconds;
    // The first tenth is warm-up: pools, JIT, the provider's store filling to its bound.
    const afterWarmup = samples.filter((s) => s.settled >= options.operations / 10);
    const half = Math.floor(afterWarmup.length / 2);
    const firstHalf = afterWarmup.slice(0, half);
    const secondHalf = afterWarmup.slice(half);
    const max = (rows: Sample[], read: (s: Sample) => number | null) => Math.max(0, ...rows.map((s) => read(s) ?? 0));
    const verdicts = [...APPS, 'redis'].map((name) => {
      const read = (s: Sample) => (name === 'redis' ? s.redisBytes : s.rss[name]);
      const before = max(firstHalf, read);
      const after = max(secondHalf, read);
      const flat = after <= before + Math.max(before * 0.1, 16 * 1024 ** 2);
      return { name, before, after, flat };
    });
    const allVerified = statuses.every((r) => r.status === 'VERIFIED');
    const ok =
      verdicts.every((v) => v.flat) &&
      died.length === 0 &&
      failures === 0 &&
      allVerified &&
      effects.duplicates.length === 0;
    process.stdout.write(
      [
        '',
        `full-stack soak: ${submitted} operations in ${seconds.toFixed(0)} s (${(submitted / seconds).toFixed(0)}/s), ` +
          `${options.inflight} in flight; submit failures ${failures}; processes died ${died.length}`,
        `final statuses: ${statuses.map((r) => `${r.status} ${r.n}`).join(', ')}; provider: ${effects.total} effects` +
          ` (${effects.dropped} forgotten by its bound), ${effects.duplicates.length} references charged twice`,
        ...verdicts.map(
          (v) =>
            `  ${v.name.padEnd(17)} max first half ${mb(v.before).padStart(9)}   max second half ${mb(v.after).padStart(9)}   ` +
            (v.flat ? 'FLAT' : 'GREW'),
        ),
        ok ? 'every process flat' : 'NOT FLAT (or operations lost): see above',
        '',
      ].join('\n'),
    );
    if (!ok) process.exitCode = 1;
  } finally {
    await pool.end().catch(() => undefined);
    await cluster.stop();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
