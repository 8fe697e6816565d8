import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import type { OpenAPIObject } from '@nestjs/swagger';
import { loadConfig } from '@verity/platform';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { ApiModule } from './api.module';
import { buildOpenApi } from './openapi';

/**
 * The wire contract, generated: the OpenAPI document the API serves at /docs-json and the SDK's types made from it,
 * both checked in under libs/sdk/src/generated/. `npm run generate:wire` writes them (wire.spec.ts with WIRE_WRITE=1); wire.spec.ts fails when the
 * checked-in files differ from what the schemas give now, so a schema change cannot reach the SDK unnoticed.
 */

/** The checked-in files, relative to the repository root. */
export const WIRE_FILES = {
  openapi: 'libs/sdk/src/generated/openapi.json',
  wire: 'libs/sdk/src/generated/wire.ts',
} as const;

/**
 * The document without a server: Nest's preview mode scans the modules and controllers (all the document needs) and
 * instantiates no provider, so nothing connects to Postgres or Redis and no port is opened. The configuration is the
 * defaults; nothing in the document depends on it.
 */
export async function openApiDocument(): Promise<OpenAPIObject> {
  const app = await NestFactory.create(ApiModule.forRoot(loadConfig({})), {
    preview: true,
    logger: false,
    abortOnError: false,
  });
  try {
    return buildOpenApi(app);
  } finally {
    await app.close();
  }
}

/** The repository root: the nearest directory above this file with the workspace's package.json (src or dist). */
export function repositoryRoot(from = __dirname): string {
  for (let dir = from; dir !== dirname(dir); dir = dirname(dir)) {
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest) && JSON.parse(readFileSync(manifest, 'utf8')).name === 'verity') return dir;
  }
  throw new Error(`no verity package.json above ${from}`);
}

/** The contents each file of WIRE_FILES must have now (scripts/wire-types.mjs turns the document into types). */
export async function generateWire(root = repositoryRoot()): Promise<Record<keyof typeof WIRE_FILES, string>> {
  const document = await openApiDocument();
  const out = execFileSync(process.execPath, [join(root, 'scripts', 'wire-types.mjs')], {
    cwd: root,
    input: JSON.stringify(document),
    maxBuffer: 64 * 1024 * 1024,
  });
  return JSON.parse(out.toString('utf8')) as Record<keyof typeof WIRE_FILES, string>;
}
