import { startTracing } from '@verity/platform/tracing';

/**
 * Imported first by main.ts, before Nest, pg and ioredis are required: OpenTelemetry, when the standard `OTEL_*`
 * variables turn it on (README, Traces); null when they do not.
 */
export const tracing = startTracing('verity-api');
