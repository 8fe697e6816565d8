/**
 * Bundles each app's entry point with esbuild (`npm run build` runs it after tsc and the console build, from
 * dist/scripts/build-apps.js): dist/apps/<app>/src/main.js, as tsc wrote it, and everything it requires from dist/ and
 * node_modules become that one file, written in its place, so every way of starting an app (npm start, the Dockerfile,
 * docker-compose, the tests' stacks) runs the bundle without knowing it.
 *
 * Why: a start used to require ~1,900 files (Nest, TypeORM, rxjs, BullMQ, zod…), and resolving, reading and compiling
 * them was most of its ~1.5 s of CPU; the tests start some 1,200 app processes. Bundled, an app reads one file.
 *
 * The input is tsc's JavaScript, not the TypeScript: Nest's dependency injection needs the `design:paramtypes`
 * metadata tsc emits (`emitDecoratorMetadata`), which esbuild does not. Kept outside the bundle, required from
 * node_modules at run time as before:
 * - what OpenTelemetry instruments by patching a module when it is first required (pg, ioredis) and the SDK itself;
 * - packages that find files of their own by their own path at run time (Swagger UI's assets, Bull Board's UI, pino's
 *   transport workers, msgpackr's native decoder);
 * - Nest's optional peers this project does not install (Nest requires them in a try and goes on without them).
 * Files an app reads by its own path (the console's assets, beside main.js) stay where they were: the bundle is
 * written where main.js was, so its `__dirname` is the same.
 *
 * Each bundle is then made one-byte text (`oneByteBundle`): V8 keeps a script's whole source on the heap for the life of
 * the process, as a two-byte string if one character of it is above U+00FF (Latin-1), else as one byte per character.
 * esbuild escapes strings, templates, regular expressions and identifiers (`charset: 'ascii'`, its default) but copies
 * comments as they are, and some hundred dashes, ellipses and arrows in comments made the API's 11.5 MB bundle 23 MB of
 * its 128 MB old space (docs/benchmarks.md, "One-byte bundles").
 */
import { build, transform, type TransformOptions } from 'esbuild';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

export const BUNDLED_APPS = ['api', 'dispatcher', 'reconciler', 'sandbox-provider'] as const;

/**
 * The API's command-line entry points besides its main.js, bundled the same way: the keys CLI (`npm run keys`) and the
 * migration step (`npm run migrate`, docker-compose's migrate service) each required ~1,300 files of dist/ and
 * node_modules at every run, about a third of a run's CPU, and the tests run the keys CLI some sixty times.
 */
export const BUNDLED_COMMANDS = ['apps/api/src/keys.cli.js', 'apps/api/src/migrate.js'] as const;

/** Every file of dist/ that `buildApps` bundles in place. */
export const BUNDLED_ENTRIES: readonly string[] = [
  ...BUNDLED_APPS.map((app) => `apps/${app}/src/main.js`),
  ...BUNDLED_COMMANDS,
];

/** What each bundle still requires from node_modules at run time (esbuild's `external` patterns). */
export const KEPT_OUTSIDE = [
  // Instrumented by patching require (libs/platform/src/tracing.ts), and the SDK that does it.
  'pg',
  'pg-native',
  'ioredis',
  '@opentelemetry/*',
  // Find their own files by their own path.
  'swagger-ui-dist',
  '@bull-board/ui',
  'pino',
  // Finds its native decoder (msgpackr-extract, which BullMQ's msgpackr uses when present) by its own path; bundled, it
  // looked beside main.js, found nothing and fell back to JavaScript for every job it decoded.
  'msgpackr',
  'msgpackr-extract',
  // Nest's optional peers, not installed: required in a try, absent here as before.
  '@nestjs/microservices',
  '@nestjs/microservices/*',
  '@nestjs/websockets',
  '@nestjs/websockets/*',
  'class-validator',
  'class-transformer',
  'class-transformer/*',
];

function findRoot(from: string): string {
  for (let dir = from; dir !== path.dirname(dir); dir = path.dirname(dir)) {
    if (existsSync(path.join(dir, 'package.json')) && existsSync(path.join(dir, 'nest-cli.json'))) return dir;
  }
  throw new Error(`cannot find the repository root above ${from}`);
}

/** Characters above Latin-1, one UTF-16 unit each (each half of a surrogate pair on its own). */
const ABOVE_LATIN1 = /[\u0100-\uffff]/g;
/**
 * An ASCII stand-in for each: one unit for one, so every line keeps its length in UTF-16 units and the source map's
 * columns (counted in those units) still hold after a comment.
 */
const STAND_INS: Record<string, string> = {
  '\u2013': '-', // en dash
  '\u2014': '-', // em dash
  '\u2212': '-', // minus sign
  '\u2026': '.', // ellipsis
  '\u2192': '>', // rightwards arrow
  '\u2190': '<', // leftwards arrow
  '\u2018': "'",
  '\u2019': "'",
  '\u201c': '"',
  '\u201d': '"',
  '\u2264': '<', // less-than or equal to
  '\u2265': '>', // greater-than or equal to
  '\u2022': '*', // bullet
};

/** The bundle's text with every character above U+00FF replaced by one ASCII character per UTF-16 unit. */
export function latin1Text(code: string): string {
  return code.replace(ABOVE_LATIN1, (unit) => STAND_INS[unit] ?? '?');
}

/** How a bundle is compared with its one-byte text: its code alone, every comment dropped. */
const CODE_ONLY: TransformOptions = { minifyWhitespace: true, legalComments: 'none', charset: 'ascii', format: 'cjs' };

/**
 * Rewrites a bundle as one-byte text (`latin1Text`), and fails the build unless only its comments changed: the two texts,
 * their comments dropped by esbuild, must be the same program to the character. (esbuild writes the code itself in
 * ASCII; a character above U+00FF left in a string, a template or a regular expression would stop the build here
 * rather than change what the app does.)
 */
export async function oneByteBundle(file: string): Promise<void> {
  const code = readFileSync(file, 'utf8');
  const oneByte = latin1Text(code);
  if (oneByte === code) return;
  const [before, after] = await Promise.all([transform(code, CODE_ONLY), transform(oneByte, CODE_ONLY)]);
  if (before.code !== after.code) {
    throw new Error(`${file}: a character above U+00FF outside its comments; it cannot be made one-byte text`);
  }
  writeFileSync(file, oneByte);
}

/** Bundles every app's dist/apps/<app>/src/main.js and the API's commands (BUNDLED_ENTRIES) in place; returns the files written. */
export async function buildApps(root = findRoot(__dirname)): Promise<string[]> {
  const written: string[] = [];
  for (const file of BUNDLED_ENTRIES) {
    const entry = path.join(root, 'dist', file);
    if (!existsSync(entry)) throw new Error(`${entry} is missing: run tsc first (npm run build)`);
    await build({
      absWorkingDir: root,
      entryPoints: [entry],
      outfile: entry,
      allowOverwrite: true,
      bundle: true,
      platform: 'node',
      format: 'cjs',
      target: 'node20',
      external: KEPT_OUTSIDE,
      // Stack traces name the bundle's lines (and keep every function's name); the map leads back to dist/ and
      // node_modules, which the image has, so it carries no copy of their text (15 MB less each).
      sourcemap: 'linked',
      sourcesContent: false,
      legalComments: 'none',
      logLevel: 'error',
    });
    await oneByteBundle(entry);
    written.push(entry);
  }
  return written;
}

if (require.main === module) {
  buildApps().catch((error: unknown) => {
    console.error(error instanceof Error ? error.message : error);
    process.exit(1);
  });
}
