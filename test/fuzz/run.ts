/**
 * `npm run fuzz [-- --runs 50000 --seed 42]`: the OpenAPI-driven fuzz of the jest suite (test/fuzz), as long as
 * wanted. FUZZ_RUNS and FUZZ_SEED work too; FUZZ_PATH replays a failure with fast-check's path. Exits non-zero on a
 * failure, after printing the shrunk request.
 */
import { formatReport, runFuzz } from './fuzz';

function option(argv: string[], name: string): string | undefined {
  const i = argv.findIndex((a) => a === `--${name}` || a.startsWith(`--${name}=`));
  if (i < 0) return undefined;
  return argv[i].includes('=') ? argv[i].split('=')[1] : argv[i + 1];
}

function integer(raw: string | undefined, fallback: number, name: string): number {
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isSafeInteger(n)) throw new Error(`--${name} must be an integer, got ${raw}`);
  return n;
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  if (argv.includes('--help')) {
    process.stdout.write('npm run fuzz -- [--runs N] [--seed S] [--path P]\n');
    return;
  }
  const runs = integer(option(argv, 'runs') ?? process.env.FUZZ_RUNS, 10_000, 'runs');
  const seed = integer(option(argv, 'seed') ?? process.env.FUZZ_SEED, Date.now() % 2 ** 31, 'seed');
  const path = option(argv, 'path') ?? process.env.FUZZ_PATH;
  process.stdout.write(`fuzz: seed ${seed} (replay with --seed ${seed})\n`);
  const report = await runFuzz({ runs, seed, path, log: (line) => process.stdout.write(`${line}\n`) });
  process.stdout.write(`${formatReport(report, seed)}\n`);
  process.exitCode = report.failure || !report.readyAfter ? 1 : 0;
}

main().catch((error: unknown) => {
  process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
  process.exit(1);
});
