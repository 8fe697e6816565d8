/**
 * Node flags every Verity app runs with (the Dockerfile sets the same through NODE_OPTIONS). With V8's default
 * old-space limit the API let garbage pile up to ~270 MB RSS under load before collecting it; a 128 MB limit keeps
 * every app under 200 MB RSS at the same throughput (docs/benchmarks.md). The live heap stays far below it.
 *
 * The young generation is held to 16 MB semi-spaces (APP_SEMI_SPACE_MB). Node 24's V8 sizes them by the machine's
 * memory (64 MB on a host of 16 GB or more), and a scavenge may only run while the old space could take in a whole
 * semi-space of survivors: with 64 MB semi-spaces and ~60 MB of old space in use, every collection under load became a
 * full mark-compact (40–56 per 1,000 intake requests, 4–7 ms of API CPU per request instead of ~0.8), and the new space
 * alone held 134 MB.
 *
 * The dispatcher showed the same: with the young generation up to 192 MB beside the 128 MB old space it spent more
 * than half of its CPU per operation collecting garbage, at 220 MB RSS; with 16 MB semi-spaces less than half the CPU
 * per operation, at about 170 MB (docs/benchmarks.md, "The dispatcher's young generation").
 */
export const APP_HEAP_LIMIT_MB = 128;
export const APP_SEMI_SPACE_MB = 16;
export const APP_NODE_ARGS: readonly string[] = [
  `--max-old-space-size=${APP_HEAP_LIMIT_MB}`,
  `--max-semi-space-size=${APP_SEMI_SPACE_MB}`,
];
