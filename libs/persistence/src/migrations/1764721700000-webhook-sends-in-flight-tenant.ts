import { sqlMigration } from './sql-migration';

/**
 * The tenant of each webhook send under way (its endpoint's), written with the mark: a delete of an endpoint the caller
 * finds gone (another delete of it committed first) waits for the sends of that id marked for the caller's tenant, and
 * never for another tenant's. Marks written before (short-lived: a request's time and a second) are given their
 * endpoint's tenant where the endpoint still exists.
 */
export class WebhookSendsInFlightTenant1764721700000 extends sqlMigration('WebhookSendsInFlightTenant1764721700000', {
  up: [
    `ALTER TABLE webhook_sends_in_flight ADD COLUMN tenant_id text`,
    `UPDATE webhook_sends_in_flight s SET tenant_id = w.tenant_id FROM webhook_endpoints w WHERE w.id = s.endpoint_id`,
  ],
  down: [`ALTER TABLE webhook_sends_in_flight DROP COLUMN tenant_id`],
}) {}
