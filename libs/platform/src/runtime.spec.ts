import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { APP_HEAP_LIMIT_MB, APP_SEMI_SPACE_MB, appNodeArgs, type AppName } from './runtime';

const ROOT = join(__dirname, '..', '..', '..');
const APPS: readonly AppName[] = ['api', 'dispatcher', 'reconciler', 'sandbox-provider'];
const WORKERS = APPS.filter((app) => app !== 'api');

/** V8's heap limit (old space plus the young generation's reservation), in MB, of a Node process started with `args`. */
function heapLimitMb(args: readonly string[]): number {
  const out = spawnSync(process.execPath, [...args, '-p', 'require("v8").getHeapStatistics().heap_size_limit'], {
    encoding: 'utf8',
    env: { ...process.env, NODE_OPTIONS: '' },
  });
  if (out.status !== 0) throw new Error(out.stderr);
  return Number(out.stdout.trim()) / 2 ** 20;
}

/** A process' semi-space as V8 sized it from `args`: its heap limit is the old space plus three semi-spaces. */
function semiSpaceMb(args: readonly string[]): number {
  return (heapLimitMb(args) - APP_HEAP_LIMIT_MB) / 3;
}

/** The app whose build `file` (a path under dist/) belongs to: the migration step and the keys CLI are the API's. */
function appOf(file: string): AppName {
  const app = /^dist\/apps\/([\w-]+)\/src\/[\w.-]+\.js$/.exec(file)?.[1];
  if (!app || !(APPS as readonly string[]).includes(app)) throw new Error(`not an app's build: ${file}`);
  return app as AppName;
}

/** The Docker image's NODE_OPTIONS: every process of the image runs with them unless its service sets its own. */
function imageNodeOptions(): string {
  const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
  const set = [...dockerfile.matchAll(/^ENV NODE_OPTIONS="([^"]*)"$/gm)].map((m) => m[1]);
  expect(set).toHaveLength(1);
  return set[0];
}

describe('the Node flags each app runs with', () => {
  it.each(APPS)('%s: bound the young generation as well as the old space (three semi-spaces at most)', (app) => {
    // Node 24's V8 sizes each semi-space up to 64 MB when not told otherwise: a young generation of 192 MB beside a
    // 128 MB old space, which cost the dispatcher about twice the CPU per operation in garbage collection.
    expect(heapLimitMb(appNodeArgs(app))).toBeLessThanOrEqual(APP_HEAP_LIMIT_MB + 3 * APP_SEMI_SPACE_MB[app]);
  });

  // V8 scavenges the young generation only while the old space could take in a whole semi-space of survivors; the apps
  // keep ~60 MB of the old space in use, so a semi-space larger than an eighth of the old space's limit leaves them at
  // that edge under load, every collection a full mark-compact. Measured, not read from APP_SEMI_SPACE_MB: the bound
  // above follows that constant wherever it is set.
  it.each(APPS)('%s: hold a semi-space to an eighth of the old space, whatever memory the machine has', (app) => {
    const measured = semiSpaceMb(appNodeArgs(app));
    expect(measured).toBeGreaterThan(0);
    expect(measured).toBeLessThanOrEqual(APP_HEAP_LIMIT_MB / 8);
  });

  // The sizes measured (docs/benchmarks.md, "One-byte bundles"): with 16 MB the API reached 206–212 MB RSS under intake
  // load on Node 24, with 8 MB 170–172 MB, for 6–8 % more API CPU per request. The workers are under 200 MB with 16 and
  // keep it. Measured from a process started with the flags, so a 16 given to the API anywhere in them fails here.
  it('give the API 8 MB semi-spaces and the dispatcher, the reconciler and the sandbox provider 16', () => {
    expect(Object.fromEntries(APPS.map((app) => [app, semiSpaceMb(appNodeArgs(app))]))).toEqual({
      api: 8,
      dispatcher: 16,
      reconciler: 16,
      'sandbox-provider': 16,
    });
  });

  it("are the workers' in the Docker image's NODE_OPTIONS", () => {
    const image = imageNodeOptions();
    for (const app of WORKERS) expect(image).toBe(appNodeArgs(app).join(' '));
    expect(semiSpaceMb(image.split(' '))).toBe(16);
  });

  // `docker run verity:local` (or any deployment of the image that names no command) runs the image's CMD: its app has
  // its own flags there, the image's NODE_OPTIONS first and flags on the command line after them (the later wins).
  it("are the app's for the image's own command (CMD)", () => {
    const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
    const commands = [...dockerfile.matchAll(/^CMD (\[.*\])$/gm)].map((m) => JSON.parse(m[1]) as string[]);
    expect(commands).toHaveLength(1);
    const [node, ...rest] = commands[0];
    expect(node).toBe('node');
    const app = appOf(rest[rest.length - 1]);
    const effective = [...imageNodeOptions().split(' '), ...rest.slice(0, -1)];
    expect(heapLimitMb(effective)).toBe(heapLimitMb(appNodeArgs(app)));
    expect(semiSpaceMb(effective)).toBe(APP_SEMI_SPACE_MB[app]);
  });

  it("are each app's in docker-compose.yml: every service that runs an app's build, with its NODE_OPTIONS or the image's", () => {
    const compose = readFileSync(join(ROOT, 'docker-compose.yml'), 'utf8');
    const [common, services] = compose.split(/^services:$/m);
    // The shared anchors (x-verity-app, its environment) would hand NODE_OPTIONS to every service: they set none.
    expect(common).not.toMatch(/NODE_OPTIONS/);
    const blocks = [...services.matchAll(/^ {2}([\w-]+):\n((?:(?: {4}.*)?\n)*)/gm)];
    const found: Record<string, { app: AppName; nodeOptions: string }> = {};
    for (const [, service, block] of blocks) {
      const command = /^ {4}command: \[(.*)\]$/m.exec(block)?.[1];
      const words = command ? [...command.matchAll(/'([^']*)'/g)].map((m) => m[1]) : [];
      if (words[0] !== 'node') continue;
      const own = [...block.matchAll(/^ {6}NODE_OPTIONS: '([^']*)'$/gm)].map((m) => m[1]);
      expect(own.length).toBeLessThanOrEqual(1);
      // Flags on the command line would win over NODE_OPTIONS: the flags are set in one place per service.
      expect(words).toHaveLength(2);
      found[service] = { app: appOf(words[1]), nodeOptions: own[0] ?? imageNodeOptions() };
    }
    expect(Object.keys(found).sort()).toEqual(['api', 'dispatcher', 'migrate', 'reconciler', 'sandbox-provider']);
    for (const { app, nodeOptions } of Object.values(found)) expect(nodeOptions).toBe(appNodeArgs(app).join(' '));
    expect(semiSpaceMb(found.api.nodeOptions.split(' '))).toBe(8);
  });

  it('are the ones every npm script that starts an app passes to node', () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
      scripts: Record<string, string>;
    };
    const starts = Object.entries(pkg.scripts).filter(([, command]) => /apps\/[\w-]+\/src\/main\.js/.test(command));
    expect(starts.map(([name]) => name).sort()).toEqual([
      'start:api',
      'start:dispatcher',
      'start:reconciler',
      'start:sandbox',
    ]);
    for (const [, command] of starts) {
      const words = command.split(' ');
      expect(words[0]).toBe('node');
      const main = words[words.length - 1];
      expect(words.slice(1, -1)).toEqual(appNodeArgs(appOf(main)));
    }
    expect(semiSpaceMb(pkg.scripts['start:api'].split(' ').slice(1, -1))).toBe(8);
  });
});
