import { readdirSync } from 'node:fs';
import { join } from 'node:path';

/** The repository's root, which the docs' paths are relative to. */
export const REPOSITORY_ROOT = join(__dirname, '..', '..');

/**
 * The docs a user reads, relative to the root: README.md, the SDK's README and every page of docs/ but the records
 * (docs/decisions.md and docs/benchmarks.md: what was decided and measured when, in the words of the time).
 */
export function userDocs(): string[] {
  return [
    'README.md',
    'libs/sdk/README.md',
    ...readdirSync(join(REPOSITORY_ROOT, 'docs'))
      .filter((name) => name.endsWith('.md') && name !== 'decisions.md' && name !== 'benchmarks.md')
      .map((name) => `docs/${name}`),
  ];
}
