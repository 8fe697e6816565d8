import { sqlMigration } from './sql-migration';

/**
 * The sweeper prunes re-check requests in two walks (recheck-requests.ts), each on an index of only the rows it may
 * delete or must look at: used requests in the order of their use (it stops at the first used within the hour), and
 * unused ones oldest first (an unused one is pruned once its operation left the hold it was made for). The index on
 * every request's `requested_at` made each sweep walk past the same used-within-the-hour rows; it is dropped.
 */
export class RecheckRequestPruneIndexes1764719000000 extends sqlMigration('RecheckRequestPruneIndexes1764719000000', {
  up: [
    `CREATE INDEX recheck_requests_used ON recheck_requests (used_at) WHERE used_at IS NOT NULL`,
    `CREATE INDEX recheck_requests_unused ON recheck_requests (requested_at) WHERE used_at IS NULL`,
    `DROP INDEX recheck_requests_requested_at`,
  ],
  down: [
    `CREATE INDEX recheck_requests_requested_at ON recheck_requests (requested_at)`,
    `DROP INDEX recheck_requests_unused`,
    `DROP INDEX recheck_requests_used`,
  ],
}) {}
