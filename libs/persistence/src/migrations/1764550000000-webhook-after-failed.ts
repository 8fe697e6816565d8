import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The webhook outbox also announces a re-check that found the effect of an operation a reviewer had just resolved
 * FAILED (`operation.rechecked` with `data.after = 'FAILED'`, as `operation.needs_review`). Those events need an index
 * of their own: the outbox reads its candidates by (txid, id) through partial indexes, and this one is a second arm
 * beside events_webhook_outbox (which stays as shipped). It holds only such events, a handful in any history; building
 * it reads the events table once.
 */
export class WebhookAfterFailed1764550000000 implements MigrationInterface {
  name = 'WebhookAfterFailed1764550000000';

  async up(q: QueryRunner): Promise<void> {
    // Keep this predicate identical to the last arm of WEBHOOK_CANDIDATES_SQL in webhooks.ts.
    await q.query(`
      CREATE INDEX events_webhook_after_failed ON events (txid, id)
      WHERE (type = 'operation.rechecked' AND data->>'after' = 'FAILED')`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX events_webhook_after_failed`);
  }
}
