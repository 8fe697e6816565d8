import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = join(__dirname, '..', '..');
const SCRIPTS = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> })
  .scripts;
const DOCS = [
  'README.md',
  'libs/sdk/README.md',
  ...readdirSync(join(ROOT, 'docs')).map((name) => `docs/${name}`),
].filter((file) => file.endsWith('.md'));

/** Every `npm run <script>[ -- <arguments>]` the docs tell a user to run, up to the end of its code span or line. */
function documentedRuns(): { file: string; script: string; args: string }[] {
  return DOCS.flatMap((file) =>
    [...readFileSync(join(ROOT, file), 'utf8').matchAll(/npm run ([a-z][a-z:-]*)((?: -- [^`\n#|]*)?)/g)].map(
      ([, script, args]) => ({ file, script, args: args.replace(/^ -- /, '').trim() }),
    ),
  );
}

/** The source of the program a script runs last (`node dist/x.js` → x.ts). */
function entrySource(script: string): string | undefined {
  const entries = [...(SCRIPTS[script] ?? '').matchAll(/node dist\/(\S+)\.js/g)];
  const entry = entries.at(-1)?.[1];
  return entry === undefined ? undefined : readFileSync(join(ROOT, `${entry}.ts`), 'utf8');
}

describe('the commands the docs tell a user to run', () => {
  it('name npm scripts that exist', () => {
    const missing = documentedRuns().filter(({ script }) => SCRIPTS[script] === undefined);
    expect(missing).toEqual([]);
  });

  it('pass only options their program reads', () => {
    const unknown = documentedRuns().flatMap(({ file, script, args }) => {
      const source = entrySource(script);
      if (source === undefined) return [];
      // A program names an option as '--flag', 'flag' (a parseArgs or option table key) or flagName: (a defaults key).
      const reads = (flag: string) => {
        const camel = flag.replace(/-([a-z0-9])/g, (_, c: string) => c.toUpperCase());
        return new RegExp(`--${flag}\\b|['"]${flag}['"]|^\\s*(?:${flag}|${camel}): `, 'm').test(source);
      };
      return [...args.matchAll(/(?:^|[\s[])--([a-z][a-z0-9-]*)/g)]
        .map(([, flag]) => flag)
        .filter((flag) => !reads(flag))
        .map((flag) => `${file}: npm run ${script} -- … --${flag}`);
    });
    expect(unknown).toEqual([]);
  });
});
