import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as ts from 'typescript';
import { ROOT } from './cluster';
import { MUTANTS, parseMutantsArgs } from './mutants';

/**
 * `npm run chaos:mutants` plants each bug by an exact text replacement. When the code it patches is rewritten, the
 * anchor must move with it, or the mutant stops testing anything (the runner then fails loudly, but only when run).
 */
describe('the planted bugs of npm run chaos:mutants still find their place', () => {
  it.each(MUTANTS.map((m) => [m.name, m] as const))('%s', (_name, mutant) => {
    const source = readFileSync(join(ROOT, mutant.file), 'utf8');
    expect(source.split(mutant.find).length - 1).toBe(1);
    expect(source).not.toContain(mutant.replace);
  });
});

/**
 * …and still compile: a mutant that no longer type-checks (the code around it changed shape) fails the mutants run at
 * its build instead of testing the checker. Each mutated file is type-checked in the project, in memory.
 */
describe('the planted bugs of npm run chaos:mutants still compile', () => {
  const parsed = ts.getParsedCommandLineOfConfigFile(
    join(ROOT, 'tsconfig.json'),
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (d) => {
        throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
      },
    },
  )!;
  let previous: ts.Program | undefined;
  // Every file but the mutated one parsed once for all the mutants (a file's SourceFile is its text, parsed and bound):
  // a fresh compiler host per mutant handed TypeScript new objects for the same unchanged files, so no program reused
  // the previous one's work and each mutant parsed and bound the whole project and its typings again (~8 s of CPU each).
  const unchanged = new Map<string, ts.SourceFile | undefined>();

  it.each(MUTANTS.map((m) => [m.name, m] as const))(
    '%s',
    (_name, mutant) => {
      const file = join(ROOT, mutant.file);
      const mutated = readFileSync(file, 'utf8').replace(mutant.find, mutant.replace);
      const host = ts.createCompilerHost(parsed.options);
      const readFile = host.readFile.bind(host);
      host.readFile = (name) => (name === file ? mutated : readFile(name));
      const getSourceFile = host.getSourceFile.bind(host);
      host.getSourceFile = (name, version, onError, create) => {
        if (name === file) return ts.createSourceFile(name, mutated, version);
        if (!unchanged.has(name)) unchanged.set(name, getSourceFile(name, version, onError, create));
        return unchanged.get(name);
      };
      const program = ts.createProgram({
        rootNames: parsed.fileNames,
        options: parsed.options,
        host,
        oldProgram: previous,
      });
      previous = program;
      const diagnostics = program.getSemanticDiagnostics(program.getSourceFile(file));
      expect(diagnostics.map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'))).toEqual([]);
    },
    120_000,
  );
});

describe('npm run chaos:mutants refuses what it does not understand', () => {
  const name = MUTANTS[0].name;

  it('takes --only <name>, --only=<name> and --keep', () => {
    expect(parseMutantsArgs([])).toEqual({ keep: false, only: null });
    expect(parseMutantsArgs(['--only', name, '--keep'])).toEqual({ keep: true, only: name });
    expect(parseMutantsArgs([`--only=${name}`])).toEqual({ keep: false, only: name });
  });

  it.each([
    [['--olny', name], /unknown argument --olny/],
    [[name], /unknown argument /],
    [['--only'], /--only needs a mutant's name/],
    [['--only', '--keep'], /--only needs a mutant's name/],
    [['--only', 'no-such-mutant'], /no mutant named no-such-mutant/],
  ])('%j is refused with the usage', (argv, message) => {
    expect(() => parseMutantsArgs(argv)).toThrow(message);
    expect(() => parseMutantsArgs(argv)).toThrow(/usage: npm run chaos:mutants/);
  });
});
