import { counter } from '@verity/platform';

/** The reconciler's own metrics (served on its /metrics with the shared ones of libs/platform). */
export const reconcileAttempts = counter(
  'verity_reconcile_attempts_total',
  'Reconcile-queue jobs run (reconciliation of UNKNOWN, re-checks of held operations), by job and outcome',
  ['job', 'outcome'],
);

export const webhookDeliveries = counter(
  'verity_webhook_deliveries_total',
  'Webhook delivery attempts by result (delivered, retrying, failed, stale, skipped; deferred: put back while its tenant held its share of the slots)',
  ['result'],
);
