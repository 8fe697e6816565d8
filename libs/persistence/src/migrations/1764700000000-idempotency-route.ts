import { sqlMigration } from './sql-migration';

/**
 * An Idempotency-Key is held per tenant and per route: `POST /v1/executions` (`executions`) and
 * `POST /v1/admin/webhooks` (`webhooks`) each have their own keys, so one route's key never replays the other's
 * answer. A webhook's record names the endpoint it created; no foreign key, so a replay after the endpoint was deleted
 * can still say which one it was.
 */
export class IdempotencyRoute1764700000000 extends sqlMigration('IdempotencyRoute1764700000000', {
  up: [
    `ALTER TABLE idempotency_keys ADD COLUMN route text NOT NULL DEFAULT 'executions'
       CHECK (route IN ('executions', 'webhooks'))`,
    `ALTER TABLE idempotency_keys ADD COLUMN webhook_endpoint_id text`,
    `ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey`,
    `ALTER TABLE idempotency_keys ADD PRIMARY KEY (tenant_id, route, key)`,
  ],
  down: [
    `DELETE FROM idempotency_keys WHERE route <> 'executions'`,
    `ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey`,
    `ALTER TABLE idempotency_keys ADD PRIMARY KEY (tenant_id, key)`,
    `ALTER TABLE idempotency_keys DROP COLUMN webhook_endpoint_id`,
    `ALTER TABLE idempotency_keys DROP COLUMN route`,
  ],
}) {}
