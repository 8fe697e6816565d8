import { metricsRegistry } from '@verity/platform';
import { Counter } from 'prom-client';

/** The reconciler's own metrics (served on its /metrics with the shared ones of libs/platform). */
export const reconcileAttempts = new Counter({
  name: 'verity_reconcile_attempts_total',
  help: 'Reconcile-queue jobs run (reconciliation of UNKNOWN, re-checks of held operations), by job and outcome',
  labelNames: ['job', 'outcome'] as const,
  registers: [metricsRegistry],
});

export const webhookDeliveries = new Counter({
  name: 'verity_webhook_deliveries_total',
  help: 'Webhook delivery attempts by result (delivered, retrying, failed, stale, skipped; deferred: put back while its tenant held its share of the slots)',
  labelNames: ['result'] as const,
  registers: [metricsRegistry],
});
