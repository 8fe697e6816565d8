import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/**
 * One Prometheus registry per process. Every process (API, dispatcher, reconciler) serves it on `/metrics`, and each
 * counts what it does itself: Prometheus sums over processes. Nothing here is read from the event log, so a scrape
 * costs the same with a million events as with ten.
 *
 * Names follow Prometheus' conventions (checked by `promtool check metrics` and metrics.spec.ts): counters end in
 * `_total`, nothing else does; durations are in seconds and say so (`_seconds`).
 */
export const metricsRegistry = new Registry();

let processMetrics = false;

/** Node's own metrics (CPU, memory, event loop lag, GC), once per process; called by each app's main. */
export function collectProcessMetrics(): void {
  if (processMetrics) return;
  processMetrics = true;
  collectDefaultMetrics({ register: metricsRegistry });
  // prom-client names these sums gauges `_total`, which only a counter may end in (promtool rejects them). Each is the
  // sum of its labelled twin (`nodejs_active_handles{type}`, ...), which stays.
  for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) {
    metricsRegistry.removeSingleMetric(name);
  }
}

/**
 * The metrics are made here, each in the process registry (a metric made outside it would never be served). Label
 * names are typed: `counter(name, help, ['job'])` takes `inc({ job })`, and one with no labels takes `inc()`.
 */
export function counter<L extends string = never>(
  name: string,
  help: string,
  labelNames: readonly L[] = [],
): Counter<L> {
  return new Counter<L>({ name, help, labelNames, registers: [metricsRegistry] });
}

export function gauge<L extends string = never>(name: string, help: string, labelNames: readonly L[] = []): Gauge<L> {
  return new Gauge<L>({ name, help, labelNames, registers: [metricsRegistry] });
}

export function histogram<L extends string = never>(
  name: string,
  help: string,
  labelNames: readonly L[],
  buckets: number[],
): Histogram<L> {
  return new Histogram<L>({ name, help, labelNames, buckets, registers: [metricsRegistry] });
}

/** From seconds to an hour: an intake is verified within a second or two, a held operation after hours. */
const INTAKE_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600];

/** Status changes this process committed (counted on commit, never read back from the events table). */
export const transitionsCounter = counter(
  'verity_transitions_total',
  'Status changes committed by this process, by event type and target status',
  ['type', 'to_status'],
);

export const intakeToVerified = histogram(
  'verity_operation_intake_to_verified_seconds',
  'Time from an operation’s intake to its VERIFIED status (observed by the process that committed VERIFIED)',
  [],
  INTAKE_BUCKETS,
);

export const intakeToSettled = histogram(
  'verity_operation_intake_to_settled_seconds',
  'Time from an operation’s intake to the status it first settled in (a final status or MANUAL_REVIEW)',
  ['status'],
  INTAKE_BUCKETS,
);

/**
 * Every call to a connector (send, read-back, context read, observation), timed where it leaves Verity. `outcome` is
 * what the call answered (a send's status, a read's kind), or `error` when it threw.
 */
export const connectorCalls = histogram(
  'verity_connector_call_duration_seconds',
  'Connector call latency by connector, action, call (send, read_back, read_context, observe) and outcome',
  ['connector', 'action', 'call', 'outcome'],
  [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
);

/** Jobs per queue and state, read from BullMQ when scraped (each worker reports the queues it consumes). */
export const queueJobs = gauge(
  'verity_queue_jobs',
  'Jobs in each queue by state (waiting, active, delayed, prioritized, failed), read at scrape time',
  ['queue', 'state'],
);

export const enqueueFailures = counter(
  'verity_enqueue_failures_total',
  'Jobs this process could not enqueue after a commit (Redis away); the sweeper re-enqueues them',
  ['job'],
);

/**
 * Round trips on the API's LISTEN connection that confirm every change of a tenant's secrets committed before a request
 * was heard, before an answer is redacted with the values this process kept (TenantSecretsCache).
 */
export const secretsFreshnessRoundTrips = counter(
  'verity_secrets_freshness_round_trips_total',
  "Round trips on the LISTEN connection confirming a tenant's kept secret values are current before they are used",
);

/** Reads of a tenant's secret values for what its answers are looked through for (one statement each). */
export const tenantSecretsReads = counter(
  'verity_tenant_secrets_reads_total',
  "Reads of a tenant's secret values for redacting its answers or looking through its text (one statement each)",
);
