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
 */
import { build } from 'esbuild';
import { existsSync } from 'node:fs';
import path from 'node:path';

export const BUNDLED_APPS = ['api', 'dispatcher', 'reconciler', 'sandbox-provider'] as const;

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

/** Bundles every app's dist/apps/<app>/src/main.js in place; returns the files written. */
export async function buildApps(root = findRoot(__dirname)): Promise<string[]> {
  const written: string[] = [];
  for (const app of BUNDLED_APPS) {
    const entry = path.join(root, 'dist', 'apps', app, 'src', 'main.js');
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
