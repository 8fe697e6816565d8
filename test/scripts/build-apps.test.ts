import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { BUNDLED_ENTRIES, oneByteBundle } from '../../scripts/build-apps';
import { DIST } from '../support/stack';

/** The packages whose hundreds of files made a start slow: none may be required from node_modules at run time. */
const BUNDLED_PACKAGES = ['@nestjs/core', '@nestjs/common', 'typeorm', 'rxjs', 'bullmq', 'zod', 'express', 'ajv'];

describe('the apps as built (npm run build bundles each main.js and the API commands)', () => {
  it.each(BUNDLED_ENTRIES)('%s holds all of dist/ and node_modules but the packages kept outside', (file) => {
    const bundle = readFileSync(join(DIST, file), 'utf8');
    const required = new Set([...bundle.matchAll(/\brequire\("([^"]+)"\)/g)].map((match) => match[1]));
    // tsc's own main.js requires its neighbours ("./api.module") and packages ("@nestjs/core") by name.
    expect([...required].filter((specifier) => specifier.startsWith('.'))).toEqual([]);
    expect(BUNDLED_PACKAGES.filter((name) => required.has(name))).toEqual([]);
    expect(bundle).toContain(`//# sourceMappingURL=${basename(file)}.map`);
  });

  it.each(BUNDLED_ENTRIES)('%s has no character above U+00FF, so V8 holds its source as one-byte text', (file) => {
    const bundle = readFileSync(join(DIST, file), 'utf8');
    const above = [...new Set(bundle.match(/[\u0100-\uffff]/g) ?? [])];
    expect(above).toEqual([]);
  });

  it('keeps outside what OpenTelemetry patches as it is required, so traces still see pg and ioredis', () => {
    const api = readFileSync(join(DIST, 'apps', 'api', 'src', 'main.js'), 'utf8');
    expect(api).toContain('require("pg")');
    expect(api).toContain('require("ioredis")');
  });

  it("keeps msgpackr outside, so BullMQ's decoding finds its native addon by msgpackr's own path", () => {
    const dispatcher = readFileSync(join(DIST, 'apps', 'dispatcher', 'src', 'main.js'), 'utf8');
    expect(dispatcher).toContain('require("msgpackr")');
    expect(dispatcher).not.toContain('node-gyp-build-optional-packages');
  });
});

describe('oneByteBundle (the last step of bundling an app)', () => {
  let dir: string;
  beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'one-byte-'))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('replaces the characters above U+00FF of comments, one ASCII character for each, every line its length', async () => {
    const file = join(dir, 'main.js');
    const code =
      'const a = 1; /* a \u2014 b \u2026 c \u{1F600} */ const b = a; // \u00e9 \u2192 x\nmodule.exports = b;\n';
    writeFileSync(file, code);
    await oneByteBundle(file);
    const written = readFileSync(file, 'utf8');
    expect(written).toBe('const a = 1; /* a - b . c ?? */ const b = a; // \u00e9 > x\nmodule.exports = b;\n');
    expect(written.split('\n').map((line) => line.length)).toEqual(code.split('\n').map((line) => line.length));
  });

  it.each([
    ['a string', 'module.exports = "\u2014";\n'],
    ['a template', 'module.exports = String.raw`\u2014`;\n'],
    ['a regular expression', 'module.exports = /[\u2013\u2014]/;\n'],
  ])('refuses a character above U+00FF in %s, and leaves the file as it was', async (_, code) => {
    const file = join(dir, 'main.js');
    writeFileSync(file, code);
    await expect(oneByteBundle(file)).rejects.toThrow('a character above U+00FF outside its comments');
    expect(readFileSync(file, 'utf8')).toBe(code);
  });
});
