import { sqlMigration } from './sql-migration';

/**
 * Streams learn of new events from a Redis PUBLISH sent by the writer after its commit (libs/persistence
 * event-signal.ts), no longer from a NOTIFY trigger: Postgres serialises the commits of every NOTIFYing transaction
 * under one database-wide lock held across the WAL flush, which capped the whole pipeline (docs/benchmarks.md).
 */
export class EventsSignalAfterCommit1764470000000 extends sqlMigration('EventsSignalAfterCommit1764470000000', {
  up: [`DROP TRIGGER IF EXISTS events_notify ON events`, `DROP FUNCTION IF EXISTS events_notify()`],
  down: [
    `
      CREATE FUNCTION events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_notify('verity_events', NEW.execution_id); RETURN NULL; END $$`,
    `
      CREATE TRIGGER events_notify AFTER INSERT ON events
      FOR EACH ROW EXECUTE FUNCTION events_notify()`,
  ],
}) {}
