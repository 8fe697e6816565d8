import { sqlMigration } from './sql-migration';

/**
 * The webhook outbox also announces a provider's 2xx that came back after the operation ended FAILED
 * (`operation.acknowledged_late` with `data.after = 'FAILED'`, as `operation.needs_review`), beside a re-check that found
 * the effect after FAILED. The partial index that serves that arm of the outbox's read (events_webhook_after_failed) is
 * made again with both types. It holds only such events, a handful in any history; building it reads the events table
 * once.
 */
export class WebhookLateAcknowledgement1764610000000 extends sqlMigration('WebhookLateAcknowledgement1764610000000', {
  up: [
    // Keep this predicate identical to the last arm of WEBHOOK_CANDIDATES_SQL in webhooks.ts.
    `DROP INDEX events_webhook_after_failed`,
    `
      CREATE INDEX events_webhook_after_failed ON events (txid, id)
      WHERE (type IN ('operation.rechecked', 'operation.acknowledged_late') AND data->>'after' = 'FAILED')`,
  ],
  down: [
    `DROP INDEX events_webhook_after_failed`,
    `
      CREATE INDEX events_webhook_after_failed ON events (txid, id)
      WHERE (type = 'operation.rechecked' AND data->>'after' = 'FAILED')`,
  ],
}) {}
