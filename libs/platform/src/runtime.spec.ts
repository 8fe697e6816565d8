import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { APP_NODE_ARGS, APP_HEAP_LIMIT_MB, APP_SEMI_SPACE_MB } from './runtime';

/** V8's heap limit (old space plus the young generation's reservation), in MB, of a Node process started with `args`. */
function heapLimitMb(args: readonly string[]): number {
  const out = spawnSync(process.execPath, [...args, '-p', 'require("v8").getHeapStatistics().heap_size_limit'], {
    encoding: 'utf8',
    env: { ...process.env, NODE_OPTIONS: '' },
  });
  if (out.status !== 0) throw new Error(out.stderr);
  return Number(out.stdout.trim()) / 2 ** 20;
}

describe('the Node flags every app runs with', () => {
  it('bound the young generation as well as the old space: three semi-spaces of APP_SEMI_SPACE_MB at most', () => {
    // Node 24's V8 sizes each semi-space up to 64 MB when not told otherwise: a young generation of 192 MB beside a
    // 128 MB old space, which cost the dispatcher about twice the CPU per operation in garbage collection.
    expect(heapLimitMb(APP_NODE_ARGS)).toBeLessThanOrEqual(APP_HEAP_LIMIT_MB + 3 * APP_SEMI_SPACE_MB);
  });

  // V8 scavenges the young generation only while the old space could take in a whole semi-space of survivors; the apps
  // keep ~60 MB of the old space in use, so a semi-space larger than an eighth of the old space's limit leaves them at
  // that edge under load, every collection a full mark-compact. Measured, not read from APP_SEMI_SPACE_MB: the bound
  // above follows that constant wherever it is set.
  it('hold a semi-space to an eighth of the old space, whatever memory the machine has', () => {
    const semiSpaceMb = (heapLimitMb(APP_NODE_ARGS) - APP_HEAP_LIMIT_MB) / 3;
    expect(semiSpaceMb).toBeGreaterThan(0);
    expect(semiSpaceMb).toBeLessThanOrEqual(APP_HEAP_LIMIT_MB / 8);
  });

  it('are the ones the Docker image sets through NODE_OPTIONS', () => {
    const dockerfile = readFileSync(join(__dirname, '..', '..', '..', 'Dockerfile'), 'utf8');
    expect(dockerfile).toContain(`ENV NODE_OPTIONS="${APP_NODE_ARGS.join(' ')}"`);
  });

  it('are the ones every npm script that starts an app passes to node', () => {
    const pkg = JSON.parse(readFileSync(join(__dirname, '..', '..', '..', 'package.json'), 'utf8')) as {
      scripts: Record<string, string>;
    };
    const starts = Object.entries(pkg.scripts).filter(([, command]) => /apps\/[\w-]+\/src\/main\.js/.test(command));
    expect(starts.map(([name]) => name).sort()).toEqual([
      'start:api',
      'start:dispatcher',
      'start:reconciler',
      'start:sandbox',
    ]);
    for (const [, command] of starts) expect(command).toMatch(new RegExp(`^node ${APP_NODE_ARGS.join(' ')} dist/`));
  });
});
