import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The webhook outbox also announces a provider's 2xx that came back after the operation ended FAILED
 * (`operation.acknowledged_late` with `data.after = 'FAILED'`, as `operation.needs_review`), beside a re-check that found
 * the effect after FAILED. The partial index that serves that arm of the outbox's read (events_webhook_after_failed) is
 * made again with both types. It holds only such events, a handful in any history; building it reads the events table
 * once.
 */
export class WebhookLateAcknowledgement1764610000000 implements MigrationInterface {
  name = 'WebhookLateAcknowledgement1764610000000';

  async up(q: QueryRunner): Promise<void> {
    // Keep this predicate identical to the last arm of WEBHOOK_CANDIDATES_SQL in webhooks.ts.
    await q.query(`DROP INDEX events_webhook_after_failed`);
    await q.query(`
      CREATE INDEX events_webhook_after_failed ON events (txid, id)
      WHERE (type IN ('operation.rechecked', 'operation.acknowledged_late') AND data->>'after' = 'FAILED')`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX events_webhook_after_failed`);
    await q.query(`
      CREATE INDEX events_webhook_after_failed ON events (txid, id)
      WHERE (type = 'operation.rechecked' AND data->>'after' = 'FAILED')`);
  }
}
