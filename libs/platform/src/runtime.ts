/**
 * Node flags every Verity app runs with (the Dockerfile sets the same through NODE_OPTIONS). With V8's default
 * old-space limit the API let garbage pile up to ~270 MB RSS under load before collecting it; a 128 MB limit keeps
 * every app under 200 MB RSS at the same throughput (docs/benchmarks.md). The live heap stays far below it.
 */
export const APP_HEAP_LIMIT_MB = 128;
export const APP_NODE_ARGS: readonly string[] = [`--max-old-space-size=${APP_HEAP_LIMIT_MB}`];
