import { sqlMigration } from './sql-migration';

/**
 * The webhook outbox also announces a re-check that found the effect of an operation a reviewer had just resolved
 * FAILED (`operation.rechecked` with `data.after = 'FAILED'`, as `operation.needs_review`). Those events need an index
 * of their own: the outbox reads its candidates by (txid, id) through partial indexes, and this one is a second arm
 * beside events_webhook_outbox (which stays as shipped). It holds only such events, a handful in any history; building
 * it reads the events table once.
 */
export class WebhookAfterFailed1764550000000 extends sqlMigration('WebhookAfterFailed1764550000000', {
  up: [
    // Keep this predicate identical to the last arm of WEBHOOK_CANDIDATES_SQL in webhooks.ts.
    `
      CREATE INDEX events_webhook_after_failed ON events (txid, id)
      WHERE (type = 'operation.rechecked' AND data->>'after' = 'FAILED')`,
  ],
  down: [`DROP INDEX events_webhook_after_failed`],
}) {}
