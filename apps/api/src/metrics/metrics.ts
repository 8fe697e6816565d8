import { counter, gauge, histogram } from '@verity/platform';

/**
 * The API's own metrics, in the process registry shared with libs/ (transitions, intake latencies, connector calls,
 * enqueue failures: libs/platform metrics.ts).
 */
export const httpDuration = histogram(
  'verity_http_request_duration_seconds',
  'API request latency',
  ['method', 'route', 'status'],
  [0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
);

/** Gauges the scrape sets from Postgres (metrics.controller.ts). */
export const executionsInFlight = gauge(
  'verity_executions_in_flight',
  'Executions not yet in a terminal status, by status (read from Postgres at scrape time)',
  ['status'],
);

export const operationsInFlight = gauge(
  'verity_operations_in_flight',
  'Operations not yet VERIFIED, FAILED or CANCELLED, by status (read from Postgres at scrape time)',
  ['status'],
);

export const openObligations = gauge(
  'verity_open_obligations',
  'Open recovery obligations (MANUAL_REVIEW operations no reviewer has resolved yet) by how far past their due time they are',
  ['age'],
);

export const overdueObligations = gauge(
  'verity_overdue_obligations',
  'MANUAL_REVIEW operations whose recovery obligation is past due and not resolved by a reviewer',
);

export const submissions = counter('verity_submissions_total', 'Executions accepted by this process');

export const streamVerdictReads = counter(
  'verity_stream_verdict_reads_total',
  'Reads of an execution and its operations by its open streams, to decide whether they end (one statement each)',
);

/** The answer budget (answer-bytes.ts): stored text held by the answers under way in this process, and those waiting. */
export const answerBytesInFlight = gauge(
  'verity_api_answer_bytes_in_flight',
  'Stored text (bytes) held by the answers of executions, pages of executions and review queue pages under way in this process (ANSWER_BYTES_IN_FLIGHT)',
);

export const answersWaitingForBytes = gauge(
  'verity_api_answers_waiting_for_bytes',
  'Answers waiting for their bytes of ANSWER_BYTES_IN_FLIGHT in this process',
);
