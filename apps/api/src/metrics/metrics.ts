import { Histogram, Counter, Registry, collectDefaultMetrics, Gauge } from 'prom-client';

export const registry = new Registry();
collectDefaultMetrics({ register: registry });

export const httpDuration = new Histogram({
  name: 'verity_http_request_duration_seconds',
  help: 'API request latency',
  labelNames: ['method', 'route', 'status'] as const,
  buckets: [0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
  registers: [registry],
});

export const executionsByStatus = new Gauge({
  name: 'verity_executions',
  help: 'Executions by status',
  labelNames: ['status'] as const,
  registers: [registry],
});

export const operationsByStatus = new Gauge({
  name: 'verity_operations',
  help: 'Operations by status',
  labelNames: ['status'] as const,
  registers: [registry],
});

export const transitionsTotal = new Gauge({
  name: 'verity_transitions_total',
  help: 'Status transitions recorded in the event log, by type and target status',
  labelNames: ['type', 'to_status'] as const,
  registers: [registry],
});

export const overdueObligations = new Gauge({
  name: 'verity_overdue_obligations',
  help: 'MANUAL_REVIEW operations whose recovery obligation is past due',
  registers: [registry],
});

export const submissions = new Counter({
  name: 'verity_submissions_total',
  help: 'Executions accepted by this process',
  registers: [registry],
});

export const dispatchRefused = new Gauge({
  name: 'verity_dispatch_refused_total',
  help: 'Dispatch jobs refused by the send guard (nothing sent, nothing changed), by reason; counted by the dispatchers',
  labelNames: ['reason'] as const,
  registers: [registry],
});

export const enqueueFailures = new Counter({
  name: 'verity_enqueue_failures_total',
  help: 'Jobs this API process could not enqueue after a commit (Redis away); the sweeper re-enqueues them',
  registers: [registry],
});
