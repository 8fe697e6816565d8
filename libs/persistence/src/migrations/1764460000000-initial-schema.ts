import { sqlMigration } from './sql-migration';

export class InitialSchema1764460000000 extends sqlMigration('InitialSchema1764460000000', {
  up: [
    `
      CREATE TABLE tenants (
        id text PRIMARY KEY,
        name text NOT NULL,
        settings jsonb NOT NULL DEFAULT '{}',
        created_at timestamptz NOT NULL DEFAULT now()
      )`,
    `
      CREATE TABLE api_keys (
        id text PRIMARY KEY,
        tenant_id text NOT NULL REFERENCES tenants(id),
        role text NOT NULL CHECK (role IN ('agent', 'reviewer', 'admin')),
        key_hash text NOT NULL UNIQUE,
        key_prefix text NOT NULL,
        label text,
        created_at timestamptz NOT NULL DEFAULT now(),
        revoked_at timestamptz
      )`,
    `
      CREATE TABLE executions (
        id text PRIMARY KEY,
        tenant_id text NOT NULL REFERENCES tenants(id),
        agent_id text NOT NULL,
        intent text NOT NULL,
        status text NOT NULL,
        deadline_at timestamptz NOT NULL,
        criteria jsonb NOT NULL DEFAULT '[]',
        criteria_results jsonb,
        failure jsonb,
        event_seq bigint NOT NULL DEFAULT 0,
        idempotency_key text,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now()
      )`,
    `CREATE INDEX executions_tenant_newest ON executions (tenant_id, id DESC)`,
    `CREATE INDEX executions_tenant_status ON executions (tenant_id, status, id DESC)`,
    `
      CREATE INDEX executions_active ON executions (updated_at)
      WHERE status NOT IN ('completed', 'failed', 'cancelled', 'expired')`,
    `
      CREATE TABLE operations (
        id text PRIMARY KEY,
        execution_id text NOT NULL REFERENCES executions(id),
        tenant_id text NOT NULL,
        key text NOT NULL,
        generation int NOT NULL DEFAULT 0,
        position int NOT NULL,
        connector text NOT NULL,
        action text NOT NULL,
        params jsonb NOT NULL,
        irreversible boolean NOT NULL DEFAULT false,
        requires_approval boolean NOT NULL DEFAULT false,
        verification_method text NOT NULL DEFAULT '',
        expected_state jsonb,
        depends_on text[] NOT NULL DEFAULT '{}',
        status text NOT NULL,
        terminal_reason text,
        attempt int NOT NULL DEFAULT 0,
        evidence jsonb,
        no_change_required boolean NOT NULL DEFAULT false,
        retry_of text REFERENCES operations(id),
        approval jsonb,
        obligation jsonb,
        observation text,
        provider_ref jsonb,
        check_count int NOT NULL DEFAULT 0,
        sent_at timestamptz,
        acknowledged_at timestamptz,
        next_check_at timestamptz,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        UNIQUE (execution_id, key, generation)
      )`,
    `CREATE UNIQUE INDEX operations_one_retry ON operations (retry_of) WHERE retry_of IS NOT NULL`,
    `
      CREATE INDEX operations_unsettled ON operations (status, updated_at)
      WHERE status IN ('SENT', 'ACKNOWLEDGED', 'UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW', 'PREPARED')`,
    `
      CREATE TABLE events (
        id text PRIMARY KEY,
        execution_id text NOT NULL REFERENCES executions(id),
        tenant_id text NOT NULL,
        seq bigint NOT NULL,
        operation_id text,
        type text NOT NULL,
        from_status text,
        to_status text,
        data jsonb NOT NULL DEFAULT '{}',
        created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        UNIQUE (execution_id, seq)
      )`,
    `CREATE INDEX events_operation ON events (operation_id) WHERE operation_id IS NOT NULL`,
    // History is append-only: nothing may rewrite or remove what an agent or reviewer was told.
    `
      CREATE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'events are append-only'; END $$`,
    `
      CREATE TRIGGER events_no_update BEFORE UPDATE OR DELETE ON events
      FOR EACH ROW EXECUTE FUNCTION events_append_only()`,
    // Streams in every API process learn of new events (written by any worker) through NOTIFY, sent at commit.
    `
      CREATE FUNCTION events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_notify('verity_events', NEW.execution_id); RETURN NULL; END $$`,
    `
      CREATE TRIGGER events_notify AFTER INSERT ON events
      FOR EACH ROW EXECUTE FUNCTION events_notify()`,
    `
      CREATE TABLE idempotency_keys (
        tenant_id text NOT NULL,
        key text NOT NULL,
        request_hash text NOT NULL,
        execution_id text,
        state text NOT NULL CHECK (state IN ('in_flight', 'completed')),
        created_at timestamptz NOT NULL DEFAULT now(),
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (tenant_id, key)
      )`,
  ],
  down: [
    `DROP TABLE idempotency_keys`,
    `DROP TABLE events`,
    `DROP FUNCTION events_notify`,
    `DROP FUNCTION events_append_only`,
    `DROP TABLE operations`,
    `DROP TABLE executions`,
    `DROP TABLE api_keys`,
    `DROP TABLE tenants`,
  ],
}) {}
