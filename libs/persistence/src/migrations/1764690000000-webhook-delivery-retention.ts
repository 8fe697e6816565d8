import { sqlMigration } from './sql-migration';

/**
 * Settled webhook deliveries (delivered, failed, skipped) by their last change: the sweeper deletes those older than
 * WEBHOOK_DELIVERY_RETENTION_MS a batch at a time, oldest first, through this index (a batch never scans the log).
 */
export class WebhookDeliveryRetention1764690000000 extends sqlMigration('WebhookDeliveryRetention1764690000000', {
  up: [`CREATE INDEX webhook_deliveries_settled ON webhook_deliveries (updated_at) WHERE status <> 'pending'`],
  down: [`DROP INDEX webhook_deliveries_settled`],
}) {}
