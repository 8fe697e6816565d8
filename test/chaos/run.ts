/**
 * `npm run chaos [-- --operations 2000 --kills 20 --probability 0.2 --seed 42 ...]`: the full chaos run. Every flag
 * also reads from the environment (CHAOS_OPERATIONS, CHAOS_KILLS, CHAOS_PROBABILITY, ...). Prints the table and exits
 * non-zero when any invariant broke.
 */
import { ChaosOptions, DEFAULT_OPTIONS, runChaos } from './chaos';

const FLAGS: Record<string, { key: keyof ChaosOptions; kind: 'int' | 'float' | 'bool' | 'string'; help: string }> = {
  operations: { key: 'operations', kind: 'int', help: 'operations to submit' },
  kills: { key: 'kills', kind: 'int', help: 'worker SIGKILLs (each restarted)' },
  probability: { key: 'faultProbability', kind: 'float', help: 'chance that a send meets a fault' },
  seed: { key: 'seed', kind: 'int', help: 'seed of the workload and the chaos schedule' },
  dispatchers: { key: 'dispatchers', kind: 'int', help: 'dispatcher processes' },
  reconcilers: { key: 'reconcilers', kind: 'int', help: 'reconciler processes' },
  rate: { key: 'rate', kind: 'float', help: 'submissions per second' },
  concurrency: { key: 'concurrency', kind: 'int', help: 'submissions in flight' },
  'replica-lag-ms': { key: 'replicaLagMs', kind: 'int', help: 'sandbox replica lag' },
  'outage-ms': { key: 'outageMs', kind: 'int', help: 'how long Redis / Postgres stay down' },
  'restart-redis': { key: 'restartRedis', kind: 'bool', help: 'crash and restart Redis once' },
  'empty-redis': { key: 'emptyRedis', kind: 'bool', help: 'crash Redis once more and restart it with no data' },
  'stray-jobs': { key: 'strayJobs', kind: 'bool', help: 'enqueue duplicate dispatch jobs for SENT operations' },
  'restart-postgres': { key: 'restartPostgres', kind: 'bool', help: 'crash and restart Postgres once' },
  'redis-cluster': {
    key: 'redisCluster',
    kind: 'bool',
    help: 'queues on a local 3-node Redis Cluster, QUEUE_SHARDS=3 (Redis crashes hit the home shard node)',
  },
  pause: { key: 'pause', kind: 'bool', help: 'SIGSTOP a dispatcher past its lock, then SIGCONT' },
  'drain-timeout-s': { key: 'drainTimeoutMs', kind: 'int', help: 'bound on the drain (seconds)' },
  'stall-s': { key: 'stallMs', kind: 'int', help: 'give up draining after this long without progress (seconds)' },
  keep: { key: 'keep', kind: 'bool', help: 'keep data and logs even when everything held' },
  dir: { key: 'dir', kind: 'string', help: 'working directory (default: a new temp dir)' },
};

function parse(argv: string[], env: NodeJS.ProcessEnv): Partial<ChaosOptions> {
  const options: Record<string, unknown> = {};
  const set = (flag: string, raw: string) => {
    const spec = FLAGS[flag];
    if (!spec) throw new Error(`unknown option --${flag}\n${usage()}`);
    let value: unknown = raw;
    if (spec.kind === 'int' || spec.kind === 'float') {
      value = Number(raw);
      if (!Number.isFinite(value) || (spec.kind === 'int' && !Number.isInteger(value))) {
        throw new Error(`--${flag} must be a number, got ${raw}`);
      }
      if (flag.endsWith('-s')) value = (value as number) * 1000;
    }
    if (spec.kind === 'bool') value = !['false', '0', 'no'].includes(raw);
    options[spec.key] = value;
  };
  for (const flag of Object.keys(FLAGS)) {
    const fromEnv = env[`CHAOS_${flag.toUpperCase().replace(/-/g, '_')}`];
    if (fromEnv !== undefined && fromEnv !== '') set(flag, fromEnv);
  }
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i];
    if (arg === '--help' || arg === '-h') {
      process.stdout.write(`${usage()}\n`);
      process.exit(0);
    }
    const match = /^--(no-)?([a-z-]+)(?:=(.*))?$/.exec(arg);
    if (!match) throw new Error(`unexpected argument ${arg}\n${usage()}`);
    const [, negated, flag, inline] = match;
    if (FLAGS[flag]?.kind === 'bool') set(flag, negated ? 'false' : (inline ?? 'true'));
    else set(flag, inline ?? argv[++i] ?? '');
  }
  return options as Partial<ChaosOptions>;
}

function usage(): string {
  const lines = Object.entries(FLAGS).map(([flag, spec]) => {
    const fallback = DEFAULT_OPTIONS[spec.key];
    const shown = flag.endsWith('-s') ? Number(fallback) / 1000 : fallback;
    return `  --${flag.padEnd(18)} ${spec.help}${shown === undefined ? '' : ` (default ${String(shown)})`}`;
  });
  return ['usage: npm run chaos -- [options]', ...lines].join('\n');
}

async function main(): Promise<void> {
  const options = parse(process.argv.slice(2), process.env);
  const result = await runChaos(options);
  process.stdout.write(`\n${result.report.table}\n`);
  if (!result.ok) process.stdout.write(`\ndata and logs kept in ${result.dir}\n`);
  else if (result.options.keep) process.stdout.write(`\ndata and logs in ${result.dir}\n`);
  process.exit(result.ok ? 0 : 1);
}

main().catch((error: unknown) => {
  process.stderr.write(
    `chaos run failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exit(2);
});
