/** The four apps, each a `dist/apps/<name>/src/main.js` of its own (the migration step and the keys CLI are the API's). */
export type AppName = 'api' | 'dispatcher' | 'reconciler' | 'sandbox-provider';

/**
 * V8's old-space limit of every Verity app, in MB. With V8's default the API let garbage pile up to ~270 MB RSS under
 * load before collecting it; a 128 MB limit keeps every app under 200 MB RSS at the same throughput
 * (docs/benchmarks.md). The live heap stays far below it.
 */
export const APP_HEAP_LIMIT_MB = 128;

/**
 * The young generation's semi-space of each app, in MB. Node 24's V8 sizes semi-spaces by the machine's memory (64 MB
 * on a host of 16 GB or more), and a scavenge may only run while the old space could take in a whole semi-space of
 * survivors: with 64 MB semi-spaces and ~60 MB of old space in use, every collection under load became a full
 * mark-compact (40–56 per 1,000 intake requests, 4–7 ms of API CPU per request instead of ~0.8), and the new space
 * alone held 134 MB. The dispatcher showed the same: with the young generation up to 192 MB beside the 128 MB old space
 * it spent more than half of its CPU per operation collecting garbage, at 220 MB RSS; with 16 MB semi-spaces less than
 * half the CPU per operation, at about 170 MB (docs/benchmarks.md, "The dispatcher's young generation").
 *
 * The API alone runs with 8 MB. With 16 it reached 206–212 MB RSS at ~480 intake requests per second on Node 24 (the
 * target is 200 MB for every app); with 8, 170–172 MB in the same sitting. The cost is CPU: half-size semi-spaces
 * double the scavenges (11.7 → 23.1 per 1,000 requests, mark-compacts unchanged), about 0.08 ms per request, 6–8 % of
 * the API's CPU per intake request (docs/benchmarks.md, "One-byte bundles"). The dispatcher, the reconciler and the
 * sandbox provider stay at 16: they are under 200 MB with it, and more scavenges would be CPU per operation for
 * nothing they need.
 */
export const APP_SEMI_SPACE_MB: Readonly<Record<AppName, number>> = {
  api: 8,
  dispatcher: 16,
  reconciler: 16,
  'sandbox-provider': 16,
};

/**
 * The node flags `app` runs with, before its main on node's command line. Every place that starts an app takes them
 * from here (npm start, the tests' stacks, the benches); the Docker image's `NODE_OPTIONS` are the workers' and
 * docker-compose.yml gives the API its own, and the npm `start:*` scripts spell them out (runtime.spec checks both).
 */
export function appNodeArgs(app: AppName): readonly string[] {
  return [`--max-old-space-size=${APP_HEAP_LIMIT_MB}`, `--max-semi-space-size=${APP_SEMI_SPACE_MB[app]}`];
}
