import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BUNDLED_APPS } from '../../scripts/build-apps';
import { DIST } from '../support/stack';

/** The packages whose hundreds of files made a start slow: none may be required from node_modules at run time. */
const BUNDLED_PACKAGES = ['@nestjs/core', '@nestjs/common', 'typeorm', 'rxjs', 'bullmq', 'zod', 'express', 'ajv'];

describe('the apps as built (npm run build bundles each main.js)', () => {
  it.each(BUNDLED_APPS)('%s: its main.js holds all of dist/ and node_modules but the packages kept outside', (app) => {
    const bundle = readFileSync(join(DIST, 'apps', app, 'src', 'main.js'), 'utf8');
    const required = new Set([...bundle.matchAll(/\brequire\("([^"]+)"\)/g)].map((match) => match[1]));
    // tsc's own main.js requires its neighbours ("./api.module") and packages ("@nestjs/core") by name.
    expect([...required].filter((specifier) => specifier.startsWith('.'))).toEqual([]);
    expect(BUNDLED_PACKAGES.filter((name) => required.has(name))).toEqual([]);
    expect(bundle).toContain('//# sourceMappingURL=main.js.map');
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
