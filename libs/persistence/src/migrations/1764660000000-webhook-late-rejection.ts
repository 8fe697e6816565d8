import { sqlMigration } from './sql-migration';

/**
 * The webhook outbox also announces a provider's rejection that came back after the operation ended VERIFIED
 * (`operation.rejected_late` with `data.after = 'VERIFIED'`, as `operation.needs_review`): a receiver told the operation
 * settled VERIFIED learns that the provider's own answer contradicts it. The partial index that serves the "after a
 * final status" arm of the outbox's read (events_webhook_after_failed) is made again with it. It holds only such events,
 * a handful in any history; building it reads the events table once.
 */
export class WebhookLateRejection1764660000000 extends sqlMigration('WebhookLateRejection1764660000000', {
  up: [
    // Keep this predicate identical to the last arm of WEBHOOK_CANDIDATES_SQL in webhooks.ts.
    `DROP INDEX events_webhook_after_failed`,
    `
      CREATE INDEX events_webhook_after_failed ON events (txid, id)
      WHERE ((type IN ('operation.rechecked', 'operation.acknowledged_late') AND data->>'after' = 'FAILED')
          OR (type = 'operation.rejected_late' AND data->>'after' = 'VERIFIED'))`,
  ],
  down: [
    `DROP INDEX events_webhook_after_failed`,
    `
      CREATE INDEX events_webhook_after_failed ON events (txid, id)
      WHERE (type IN ('operation.rechecked', 'operation.acknowledged_late') AND data->>'after' = 'FAILED')`,
  ],
}) {}
