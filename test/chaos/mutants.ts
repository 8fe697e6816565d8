/**
 * `npm run chaos:mutants [-- --only <name>] [--keep]`: does the chaos run alone catch the bugs it exists to catch?
 *
 * The committed tree (HEAD) is copied to a scratch directory (git archive, so the worktree and the repository are
 * never touched); then, one at a time, each planted bug below is applied to that copy, the copy is built, and the
 * reduced chaos run (the options of chaos.test.ts) runs there. A bug is caught when that run exits non-zero (some
 * invariant broke); the unmutated copy runs first and must pass. Prints the result as a markdown table, the rows each
 * run broke, and where the scratch copy is (removed at the end unless --keep).
 *
 * Each mutation is an exact text replacement that must match exactly once: a mutant whose anchor moved fails loudly
 * instead of testing an unmutated tree.
 */
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { ROOT } from './cluster';

export interface Mutant {
  name: string;
  /** What the planted bug does, in words. */
  bug: string;
  file: string;
  find: string;
  replace: string;
}

export const MUTANTS: Mutant[] = [
  {
    name: 'resend-unknown',
    bug: 'the reconciler re-sends an UNKNOWN payment whose read-back did not find it',
    file: 'apps/reconciler/src/verification.service.ts',
    find: `    const read = await this.readBack(op);
    const absent = read.kind === 'absent';
    const decision = decideReadBack({
      status: S.RECONCILING,`,
    replace: `    const read = await this.readBack(op);
    const absent = read.kind === 'absent';
    if (absent && op.connector === 'sandbox.payments') {
      await connector.send(connectorOperation(op), await this.connectors.environmentOf(op));
    }
    const decision = decideReadBack({
      status: S.RECONCILING,`,
  },
  {
    name: 'new-key-per-attempt',
    bug: 'the payments connector sends a new Idempotency-Key on every attempt',
    file: 'libs/connectors/src/sandbox-payments.connector.ts',
    find: "'idempotency-key': `verity-${op.tenantId}-${charge.reference}`,",
    replace: "'idempotency-key': `verity-${op.tenantId}-${charge.reference}-${Date.now()}`,",
  },
  {
    name: 'resend-found-sent',
    bug: 'a dispatcher that finds its operation already SENT calls the connector again',
    file: 'apps/dispatcher/src/sender.service.ts',
    find: `    if (start.kind === 'orphan') return outcome(await this.markOrphan(op));`,
    replace: `    if (start.kind === 'orphan') {
      const again = this.connectors.require(op.connector);
      return { outcome: 'sent', ...(await this.send(op, op.attempt, again, {}, options)) };
    }`,
  },
  {
    name: 'made-up-evidence',
    bug: 'verification writes VERIFIED with read-back evidence made up from the send reply when the read does not find it',
    file: 'apps/reconciler/src/verification.service.ts',
    // Both "not found" verdicts: a charge whose write version the replica has not reached reads as stale, not absent.
    find: `    const read = await this.readBack(op);
    const decision = decideReadBack({
      status: S.ACKNOWLEDGED,`,
    replace: `    const read = await this.readBack(op);
    if ((read.kind === 'absent' || read.kind === 'stale') && op.providerRef) {
      const record = { ...op.providerRef, amount: op.params.amount, currency: op.params.currency, status: 'succeeded' };
      return this.settle(op, S.VERIFIED, null, { method: 'read_after_write', ...read.evidence, record }, 'verified');
    }
    const decision = decideReadBack({
      status: S.ACKNOWLEDGED,`,
  },
  {
    name: 'model-unknown-to-sent',
    bug: 'the status model allows UNKNOWN → SENT',
    file: 'libs/status-model/src/operation.ts',
    find: `  rule(S.UNKNOWN, S.RECONCILING, 'the reconciler reads the source'),`,
    replace: `  rule(S.UNKNOWN, S.RECONCILING, 'the reconciler reads the source'),
  rule(S.UNKNOWN, S.SENT, 'send again when the outcome is unknown'),`,
  },
];

/** The reduced run of chaos.test.ts, through the runner. */
const REDUCED = [
  '--operations',
  '200',
  '--kills',
  '3',
  '--probability',
  '0.2',
  '--dispatchers',
  '2',
  '--reconcilers',
  '2',
  '--rate',
  '10',
  '--drain-timeout-s',
  '180',
  '--stall-s',
  '90',
];

interface Outcome {
  name: string;
  bug: string;
  exitCode: number | null;
  broken: string[];
  seconds: number;
  log: string;
}

function sh(command: string, args: string[], cwd: string): void {
  const result = spawnSync(command, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' });
  if (result.status !== 0) {
    throw new Error(`${command} ${args.join(' ')} failed (${result.status}):\n${result.stdout}\n${result.stderr}`);
  }
}

function run(command: string, args: string[], cwd: string, logFile: string): Promise<number | null> {
  return new Promise((resolve) => {
    const out = fs.openSync(logFile, 'w');
    const child = spawn(command, args, { cwd, stdio: ['ignore', out, out] });
    child.on('exit', (code) => {
      fs.closeSync(out);
      resolve(code);
    });
  });
}

export const MUTANTS_USAGE =
  'usage: npm run chaos:mutants -- [--only <mutant>] [--keep]\n' +
  '  --only <mutant>  plant only this one (one of: ' +
  MUTANTS.map((m) => m.name).join(', ') +
  ')\n  --keep           keep the scratch copy, its logs and results.md';

/**
 * The runner's options. Anything else is refused with the usage: a misspelt `--olny x` that ran all five mutants
 * (twenty minutes) instead of the one asked for wasted the run it was meant to save.
 */
export function parseMutantsArgs(argv: readonly string[]): { keep: boolean; only: string | null } {
  let keep = false;
  let only: string | null = null;
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i];
    if (arg === '--keep') keep = true;
    else if (arg === '--only' || arg.startsWith('--only=')) {
      const name = arg === '--only' ? argv[(i += 1)] : arg.slice('--only='.length);
      if (!name || name.startsWith('--')) throw new Error(`--only needs a mutant's name\n${MUTANTS_USAGE}`);
      if (!MUTANTS.some((m) => m.name === name)) throw new Error(`no mutant named ${name}\n${MUTANTS_USAGE}`);
      only = name;
    } else throw new Error(`unknown argument ${arg}\n${MUTANTS_USAGE}`);
  }
  return { keep, only };
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${MUTANTS_USAGE}\n`);
    process.exit(0);
  }
  const { keep, only } = parseMutantsArgs(argv);
  const chosen = MUTANTS.filter((m) => only === null || m.name === only);

  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'verity-mutants-'));
  const head = spawnSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).stdout.trim();
  process.stdout.write(`scratch copy of ${head} in ${scratch}\n`);
  sh('sh', ['-c', `git -C '${ROOT}' archive --format=tar HEAD | tar -x -C '${scratch}'`], ROOT);
  fs.symlinkSync(fs.realpathSync(path.join(ROOT, 'node_modules')), path.join(scratch, 'node_modules'));

  // Check every anchor before spending minutes on the first run.
  const originals = new Map<string, string>();
  for (const mutant of chosen) {
    const text = fs.readFileSync(path.join(scratch, mutant.file), 'utf8');
    originals.set(mutant.file, text);
    const hits = text.split(mutant.find).length - 1;
    if (hits !== 1) throw new Error(`mutant ${mutant.name}: its anchor matches ${hits} times in ${mutant.file}`);
  }

  const outcomes: Outcome[] = [];
  const baseline: Mutant = { name: 'none', bug: 'the unmutated tree', file: '', find: '', replace: '' };
  for (const mutant of [baseline, ...chosen]) {
    for (const [file, text] of originals) fs.writeFileSync(path.join(scratch, file), text);
    if (mutant.file) {
      const file = path.join(scratch, mutant.file);
      fs.writeFileSync(file, originals.get(mutant.file)!.replace(mutant.find, mutant.replace));
    }
    const started = Date.now();
    process.stdout.write(`\n[${mutant.name}] ${mutant.bug}: building… `);
    fs.rmSync(path.join(scratch, 'dist'), { recursive: true, force: true });
    sh('npm', ['run', 'build', '--silent'], scratch);
    process.stdout.write('running the reduced chaos run… ');
    const logFile = path.join(scratch, `chaos-${mutant.name}.log`);
    const exitCode = await run(process.execPath, ['dist/test/chaos/run.js', ...REDUCED], scratch, logFile);
    const log = fs.readFileSync(logFile, 'utf8');
    const broken = log
      .split('\n')
      .filter((line) => line.includes('BROKEN'))
      .map((line) => line.replace(/\s+BROKEN$/, '').replace(/\s{2,}/g, ': '));
    const seconds = Math.round((Date.now() - started) / 1000);
    outcomes.push({ name: mutant.name, bug: mutant.bug, exitCode, broken, seconds, log: logFile });
    process.stdout.write(`exit ${exitCode} in ${seconds} s\n${broken.map((b) => `  ${b}`).join('\n')}\n`);
  }

  const verdict = (o: Outcome) => {
    if (o.name === 'none') return o.exitCode === 0 ? 'passes (every invariant held)' : `FAILS (exit ${o.exitCode})`;
    if (o.exitCode === 1) return 'caught';
    return o.exitCode === 0 ? 'NOT CAUGHT' : `harness error (exit ${o.exitCode})`;
  };
  const table = [
    '| planted bug | chaos run | rows that broke |',
    '| ----------- | --------- | --------------- |',
    ...outcomes.map((o) => `| ${o.bug} (\`${o.name}\`) | ${verdict(o)} | ${o.broken.join('; ') || '—'} |`),
  ].join('\n');
  process.stdout.write(`\n${table}\n`);
  fs.writeFileSync(path.join(scratch, 'results.md'), `${table}\n`);
  const ok = outcomes[0].exitCode === 0 && outcomes.slice(1).every((o) => o.exitCode === 1 && o.broken.length > 0);
  if (keep || !ok) process.stdout.write(`\nscratch copy, logs and results.md kept in ${scratch}\n`);
  else fs.rmSync(scratch, { recursive: true, force: true });
  process.exit(ok ? 0 : 1);
}

if (require.main === module) {
  main().catch((error: unknown) => {
    process.stderr.write(`mutants: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(2);
  });
}
