import { sqlMigration } from './sql-migration';

/**
 * Updates that can stay on their page (HOT: no new entry in any index). An UPDATE is HOT only if it changes no column
 * that any index names (key, expression or partial-index predicate) and the page has room for the new version.
 *
 * `updated_at`, which every write bumps, leaves the two partial indexes of unfinished rows. With it indexed, no update
 * of executions or operations could be HOT; the commonest one — the execution's `event_seq` bump that every operation
 * transition makes — changes nothing else that is indexed. `executions_active` now holds the deadline (what the
 * deadline sweep orders by, and it never changes); `operations_unsettled` holds the status alone. The sweeps that order
 * by `updated_at` sort the unfinished rows these indexes find: work bounded by what is in flight.
 *
 * A change of `status` still cannot be HOT (the column is indexed, and must be: the in-flight indexes are partial on
 * it). The status lists are this migration's, frozen like every shipped migration; metrics.repository.spec checks that
 * the statements generated from libs/status-model still match these predicates.
 * Both indexes hold only unfinished rows, so rebuilding them is quick even on a large table.
 *
 * No fillfactor: measured on the happy path (docs/benchmarks.md), fillfactor 85 made no update HOT that the default
 * did not (page pruning already frees the room) and grew the executions heap by 40 %.
 */
export class HotUpdates1764530000000 extends sqlMigration('HotUpdates1764530000000', {
  up: [
    `DROP INDEX executions_active`,
    `
      CREATE INDEX executions_active ON executions (deadline_at)
      WHERE status NOT IN ('completed', 'failed', 'cancelled', 'expired')`,
    `DROP INDEX operations_unsettled`,
    `
      CREATE INDEX operations_unsettled ON operations (status)
      WHERE status IN ('SENT', 'ACKNOWLEDGED', 'UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW', 'PREPARED')`,
  ],
  down: [
    `DROP INDEX operations_unsettled`,
    `
      CREATE INDEX operations_unsettled ON operations (status, updated_at)
      WHERE status IN ('SENT', 'ACKNOWLEDGED', 'UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW', 'PREPARED')`,
    `DROP INDEX executions_active`,
    `
      CREATE INDEX executions_active ON executions (updated_at)
      WHERE status NOT IN ('completed', 'failed', 'cancelled', 'expired')`,
  ],
}) {}
