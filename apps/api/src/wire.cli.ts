import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { WIRE_FILES, generateWire, repositoryRoot } from './wire';

/** `npm run generate:wire`: writes the OpenAPI document and the SDK's types generated from it (see wire.ts). */
async function main(): Promise<void> {
  const root = repositoryRoot();
  const files = await generateWire(root);
  for (const [name, path] of Object.entries(WIRE_FILES) as [keyof typeof WIRE_FILES, string][]) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), files[name]);
    process.stdout.write(`wrote ${path}\n`);
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
