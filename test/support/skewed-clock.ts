import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * A host whose clock is wrong, for one app process: a file its NODE_OPTIONS `--require`s, which shifts the process'
 * Date (new Date(), Date.now()) by CLOCK_SKEW_MS from its environment — what such a host gives every library — while
 * the database's clock stays true. `env(skewMs)` is what to start the app with; `remove()` deletes the file.
 */
export function skewedClock(): { env(skewMs: number): Record<string, string>; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'verity-clock-'));
  const preload = join(dir, 'skewed-clock.cjs');
  writeFileSync(
    preload,
    `const skew = Number(process.env.CLOCK_SKEW_MS);
const Real = Date;
class Skewed extends Real {
  constructor(...args) { super(...(args.length === 0 ? [Real.now() + skew] : args)); }
  static now() { return Real.now() + skew; }
}
globalThis.Date = Skewed;
`,
  );
  return {
    env: (skewMs) => ({ NODE_OPTIONS: `--require ${preload}`, CLOCK_SKEW_MS: String(skewMs) }),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
