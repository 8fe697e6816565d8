import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { templateName } from '../support/services';

/**
 * Test databases are copied from a migrated template named by the migrations (test/support/services.ts). Most
 * migrations are statements handed to one shared `sqlMigration` class factory, so their code is the same function for
 * all: a name taken from the code alone stayed the same when a migration's SQL was edited under the same name, and every
 * test then ran on the schema from before the edit.
 */
describe('the template test databases are copied from', () => {
  const sources = join(__dirname, '..', '..', 'libs', 'persistence', 'src', 'migrations');
  let copy: string;
  beforeEach(() => {
    copy = mkdtempSync(join(tmpdir(), 'verity-migrations-'));
    cpSync(sources, copy, { recursive: true });
  });
  afterEach(() => rmSync(copy, { recursive: true, force: true }));

  it('is the same for the same migrations', () => {
    expect(templateName(copy)).toBe(templateName(sources));
    expect(templateName(sources)).toMatch(/^verity_template_[0-9a-f]{16}$/);
  });

  it('is another one when a migration’s SQL is edited under the same name', () => {
    const file = readdirSync(copy).find((f) => f.endsWith('-sweep-log.ts'))!;
    const source = readFileSync(join(copy, file), 'utf8');
    expect(source).toContain('report jsonb');
    writeFileSync(join(copy, file), source.replace('report jsonb', 'report jsonb NOT NULL'));
    expect(templateName(copy)).not.toBe(templateName(sources));
  });

  it('is another one when a migration is added, and not for a change to a spec beside them', () => {
    writeFileSync(join(copy, 'any.spec.ts'), '// a test beside the migrations');
    expect(templateName(copy)).toBe(templateName(sources));
    const names = ['Extra1999999999999'];
    expect(templateName(sources, names)).not.toBe(templateName(sources));
  });
});
