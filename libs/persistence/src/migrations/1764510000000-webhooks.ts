import { sqlMigration } from './sql-migration';

/**
 * Webhooks. Endpoints (URL, event types, a sealed signing secret), one delivery row per message and endpoint (the
 * delivery log), and the outbox cursor.
 *
 * The outbox reads the events table itself, so nothing on the transition path writes anything more: every event row
 * now records the transaction that wrote it (`txid`, a column default — no extra statement), and a partial index
 * holds only the rows that can become a webhook. The reader takes the events of transactions older than the oldest
 * one still running (`pg_snapshot_xmin`), so an event committed late by a slow transaction is never skipped.
 */
export class Webhooks1764510000000 extends sqlMigration('Webhooks1764510000000', {
  up: [
    // Rows written before this migration keep txid NULL and are never announced.
    `ALTER TABLE events ADD COLUMN txid xid8`,
    `ALTER TABLE events ALTER COLUMN txid SET DEFAULT pg_current_xact_id()`,
    // Keep this predicate identical to WEBHOOK_CANDIDATES in webhooks.ts: the planner uses the index only then.
    `
      CREATE INDEX events_webhook_outbox ON events (txid, id)
      WHERE (type IN ('obligation.escalated', 'outcome.evaluated')
        OR (type = 'operation.status_changed' AND to_status IN ('VERIFIED', 'FAILED', 'CANCELLED', 'ACKNOWLEDGED', 'MANUAL_REVIEW'))
        OR (type = 'execution.status_changed' AND to_status IN ('completed', 'failed', 'cancelled', 'expired')))`,
    `
      CREATE TABLE webhook_endpoints (
        id text PRIMARY KEY,
        tenant_id text NOT NULL REFERENCES tenants(id),
        url text NOT NULL,
        events text[] NOT NULL,
        secret text NOT NULL,
        disabled_at timestamptz,
        disabled_reason text,
        consecutive_failures integer NOT NULL DEFAULT 0,
        created_by text,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now()
      )`,
    `CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints (tenant_id, created_at)`,
    `
      CREATE TABLE webhook_deliveries (
        id text PRIMARY KEY,
        endpoint_id text NOT NULL REFERENCES webhook_endpoints(id) ON DELETE CASCADE,
        tenant_id text NOT NULL,
        event_id text,
        type text NOT NULL,
        payload jsonb NOT NULL,
        status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed', 'skipped')),
        round integer NOT NULL DEFAULT 0,
        attempts integer NOT NULL DEFAULT 0,
        last_attempt_at timestamptz,
        last_response_status integer,
        last_error text,
        delivered_at timestamptz,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        UNIQUE (endpoint_id, event_id)
      )`,
    `CREATE INDEX webhook_deliveries_log ON webhook_deliveries (endpoint_id, id DESC)`,
    `CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (updated_at) WHERE status = 'pending'`,
    `
      CREATE TABLE webhook_outbox_cursor (
        id integer PRIMARY KEY CHECK (id = 1),
        last_txid xid8 NOT NULL,
        last_event_id text NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now()
      )`,
    // Start at this transaction: events written from now on are announced, history before is not.
    `INSERT INTO webhook_outbox_cursor (id, last_txid, last_event_id) VALUES (1, pg_current_xact_id(), '')`,
  ],
  down: [
    `DROP TABLE webhook_outbox_cursor`,
    `DROP TABLE webhook_deliveries`,
    `DROP TABLE webhook_endpoints`,
    `DROP INDEX events_webhook_outbox`,
    `ALTER TABLE events DROP COLUMN txid`,
  ],
}) {}
