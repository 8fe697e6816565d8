import { metricsRegistry } from '@verity/platform';
import { Counter, Gauge, Histogram } from 'prom-client';

/**
 * The API's own metrics, in the process registry shared with libs/ (transitions, intake latencies, connector calls,
 * enqueue failures: libs/platform metrics.ts).
 */
export const httpDuration = new Histogram({
  name: 'verity_http_request_duration_seconds',
  help: 'API request latency',
  labelNames: ['method', 'route', 'status'] as const,
  buckets: [0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
  registers: [metricsRegistry],
});

/** A gauge the scrape sets from Postgres (metrics.controller.ts), in the shared registry. */
function scrapedGauge<L extends string>(name: string, help: string, labelNames: readonly L[]) {
  return new Gauge<L>({ name, help, labelNames, registers: [metricsRegistry] });
}

export const executionsInFlight = scrapedGauge(
  'verity_executions_in_flight',
  'Executions not yet in a terminal status, by status (read from Postgres at scrape time)',
  ['status'],
);

export const operationsInFlight = scrapedGauge(
  'verity_operations_in_flight',
  'Operations not yet VERIFIED, FAILED or CANCELLED, by status (read from Postgres at scrape time)',
  ['status'],
);

export const openObligations = scrapedGauge(
  'verity_open_obligations',
  'Open recovery obligations (MANUAL_REVIEW operations no reviewer has resolved yet) by how far past their due time they are',
  ['age'],
);

export const overdueObligations = scrapedGauge(
  'verity_overdue_obligations',
  'MANUAL_REVIEW operations whose recovery obligation is past due and not resolved by a reviewer',
  [],
);

export const submissions = new Counter({
  name: 'verity_submissions_total',
  help: 'Executions accepted by this process',
  registers: [metricsRegistry],
});

export const streamVerdictReads = new Counter({
  name: 'verity_stream_verdict_reads_total',
  help: 'Reads of an execution and its operations by its open streams, to decide whether they end (one statement each)',
  registers: [metricsRegistry],
});
