/**
 * Builds the review console's browser assets with esbuild (`npm run build` runs it after tsc, from
 * dist/scripts/build-console.js): apps/api/src/console/client/main.ts and what it imports — `@verity/sdk` from
 * libs/sdk/src, the status model, eventsource-parser — into one script, and client/console.css into one stylesheet,
 * both written to dist/apps/api/src/console/assets, where the API reads them at boot. The script is an IIFE with no
 * eval and no inline anything, so the console's CSP stays `script-src 'self'; style-src 'self'`.
 */
import { build } from 'esbuild';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/**
 * What the browser bundle may contain: the console, the SDK (not its MCP server), the status model, the parser, and
 * platform's text rule.
 */
const ALLOWED_INPUTS = [
  /^apps\/api\/src\/console\/client\//,
  /^apps\/api\/src\/console\/mask\.ts$/,
  /^libs\/sdk\/src\/(?!mcp\/)[^/]+\.ts$/,
  /^libs\/status-model\/src\//,
  // The rule of text shown to a person (hidden characters escaped, as the API refuses them): a file free of imports.
  /^libs\/platform\/src\/text-issue\.ts$/,
  // node_modules may be a symlink (a git worktree sharing the checkout's), so any path ending in the package.
  /(^|\/)node_modules\/eventsource-parser\//,
];

function findRoot(from: string): string {
  for (let dir = from; dir !== path.dirname(dir); dir = path.dirname(dir)) {
    if (existsSync(path.join(dir, 'package.json')) && existsSync(path.join(dir, 'nest-cli.json'))) return dir;
  }
  throw new Error(`cannot find the repository root above ${from}`);
}

export interface ConsoleBuild {
  /** The files written: console.js and console.css. */
  files: string[];
  /** Every source file in the bundle, relative to the repository root. */
  inputs: string[];
}

export async function buildConsole(
  root = findRoot(__dirname),
  outdir = path.join(root, 'dist', 'apps', 'api', 'src', 'console', 'assets'),
): Promise<ConsoleBuild> {
  const client = path.join(root, 'apps', 'api', 'src', 'console', 'client');
  const result = await build({
    absWorkingDir: root,
    entryPoints: [
      { in: path.join(client, 'main.ts'), out: 'console' },
      { in: path.join(client, 'console.css'), out: 'console' },
    ],
    outdir,
    bundle: true,
    format: 'iife',
    platform: 'browser',
    target: ['es2022', 'chrome116', 'firefox124', 'safari17.4'],
    // Its paths resolve @verity/sdk and @verity/status-model to libs/*/src, as for tsc.
    tsconfig: path.join(client, 'tsconfig.json'),
    minify: true,
    legalComments: 'none',
    charset: 'utf8',
    metafile: true,
    logLevel: 'warning',
    // Checked before anything is written: a stray import must not leave a bundle behind.
    write: false,
  });
  const inputs = Object.keys(result.metafile.inputs);
  const stray = inputs.filter((input) => !ALLOWED_INPUTS.some((re) => re.test(input)));
  if (stray.length > 0) {
    throw new Error(`the console bundle must not contain ${stray.join(', ')}: browser code imports only the SDK`);
  }
  mkdirSync(outdir, { recursive: true });
  for (const file of result.outputFiles) writeFileSync(file.path, file.contents);
  return { files: result.outputFiles.map((file) => file.path), inputs };
}

if (require.main === module) {
  buildConsole().catch((error: unknown) => {
    console.error(error instanceof Error ? error.message : error);
    process.exit(1);
  });
}
