import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

const ROOT = join(__dirname, '..', '..');
/**
 * What a user of this repository cannot open: files outside it, the issue tracker, the design's source documents.
 * The MCP SDK's own `shared/` module path is a package import, not a pointer outside the repository.
 */
const OUTSIDE_REFERENCE = /(?<!@modelcontextprotocol\/sdk\/)shared\/|DESIGN|issue [0-9]|reference 00/;

function files(path: string): string[] {
  if (statSync(path).isFile()) return [path];
  return readdirSync(path)
    .filter((name) => name !== 'node_modules' && name !== 'dist' && !name.startsWith('.'))
    .flatMap((name) => files(join(path, name)));
}

describe('the project’s docs and code stand on their own', () => {
  it('README, docs, apps and libs never point outside the repository, at issue numbers or reference ids', () => {
    const found: string[] = [];
    for (const file of ['README.md', 'docs', 'apps', 'libs'].flatMap((p) => files(join(ROOT, p)))) {
      readFileSync(file, 'utf8')
        .split('\n')
        .forEach((line, i) => {
          if (OUTSIDE_REFERENCE.test(line)) found.push(`${relative(ROOT, file)}:${i + 1}: ${line.trim()}`);
        });
    }
    expect(found).toEqual([]);
  });
});
