import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from './cluster';
import { MUTANTS } from './mutants';

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
