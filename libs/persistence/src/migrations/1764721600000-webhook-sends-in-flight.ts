import { sqlMigration } from './sql-migration';

/**
 * The webhook sends under way: an attempt writes its row (its endpoint, and the time by which its request has ended)
 * in the statement that reads its delivery for the last time before signing, and deletes it once the request has
 * ended. No foreign key: a row outlives its endpoint's delete, which waits for it before answering.
 */
export class WebhookSendsInFlight1764721600000 extends sqlMigration('WebhookSendsInFlight1764721600000', {
  up: [
    `CREATE TABLE webhook_sends_in_flight (
       id text PRIMARY KEY,
       endpoint_id text NOT NULL,
       until timestamptz NOT NULL
     )`,
    `CREATE INDEX webhook_sends_in_flight_endpoint ON webhook_sends_in_flight (endpoint_id, until)`,
  ],
  down: [`DROP TABLE webhook_sends_in_flight`],
}) {}
