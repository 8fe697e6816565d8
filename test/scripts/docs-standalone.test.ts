import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';

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

  it('every link between the docs names a file that exists and, after #, one of its headings', () => {
    /** GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces to -; repeats get -1, -2… */
    const anchorsOf = (file: string): Set<string> => {
      const seen = new Map<string, number>();
      const anchors = new Set<string>();
      const text = readFileSync(file, 'utf8').replace(/```[\s\S]*?```/g, '');
      for (const [, heading] of text.matchAll(/^#{1,6} (.*)$/gm)) {
        const slug = heading
          .trim()
          .toLowerCase()
          .replace(/[^\p{L}\p{N}_\- ]/gu, '')
          .replace(/ /g, '-');
        const n = seen.get(slug);
        seen.set(slug, (n ?? -1) + 1);
        anchors.add(n === undefined ? slug : `${slug}-${n + 1}`);
      }
      return anchors;
    };
    const broken: string[] = [];
    for (const file of ['README.md', 'docs', 'libs/sdk/README.md'].flatMap((p) => files(join(ROOT, p)))) {
      if (!file.endsWith('.md')) continue;
      const text = readFileSync(file, 'utf8').replace(/```[\s\S]*?```/g, '');
      for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^[a-z]+:/.test(target)) continue;
        const [path, anchor] = target.split('#');
        const linked = path === '' ? file : join(dirname(file), path);
        if (!existsSync(linked)) broken.push(`${relative(ROOT, file)}: ${target} (no such file)`);
        else if (anchor !== undefined && linked.endsWith('.md') && !anchorsOf(linked).has(anchor)) {
          broken.push(`${relative(ROOT, file)}: ${target} (no such heading)`);
        }
      }
    }
    expect(broken).toEqual([]);
  });

  it('no command fetches @verity/sdk from the npm registry, where it is not published (the tarball is named instead)', () => {
    const fromRegistry = /npm (?:install|i|add) @verity\/sdk|npx [^`\n]*-p @verity\/sdk|"-p", "@verity\/sdk"/;
    const found = ['README.md', 'docs', 'libs/sdk/README.md']
      .flatMap((p) => files(join(ROOT, p)))
      .flatMap((file) =>
        readFileSync(file, 'utf8')
          .split('\n')
          .flatMap((line, i) => (fromRegistry.test(line) ? [`${relative(ROOT, file)}:${i + 1}: ${line.trim()}`] : [])),
      );
    expect(found).toEqual([]);
  });

  it('a section sign names a section of docs/contract.md, or of the RFC it follows', () => {
    const contract = readFileSync(join(ROOT, 'docs', 'contract.md'), 'utf8');
    const sections = new Set([...contract.matchAll(/^## (\d+)\. /gm)].map((m) => m[1]));
    const found: string[] = [];
    for (const file of ['README.md', 'docs'].flatMap((p) => files(join(ROOT, p)))) {
      const text = readFileSync(file, 'utf8').replace(/\s+/g, ' ');
      for (const m of text.matchAll(/(RFC \d+,? )?§ ?(\d+)/g)) {
        if (m[1] === undefined && !sections.has(m[2])) found.push(`${relative(ROOT, file)}: ${m[0]}`);
      }
    }
    expect(found).toEqual([]);
  });
});
