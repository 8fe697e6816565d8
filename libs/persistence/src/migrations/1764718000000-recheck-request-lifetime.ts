import { sqlMigration } from './sql-migration';

/**
 * A re-check request is usable only for the hold it was asked about (recheck-requests.ts; the hour of use this
 * migration came with was dropped later: an unused request has no maximum age): each
 * request keeps the operation's `attempt` when it was recorded (a later hold of the operation follows another send,
 * which counts another attempt). Requests recorded before this migration are given their operation's attempt now. The
 * column stays nullable: an API of the version before, still running during a rolling update, records requests
 * without it, and those must not fail (a 500 for a reviewer's re-check); such a request is usable while unused.
 * The index on `requested_at` lets the sweeper prune, oldest first, the requests that can no longer be used.
 */
export class RecheckRequestLifetime1764718000000 extends sqlMigration('RecheckRequestLifetime1764718000000', {
  up: [
    `ALTER TABLE recheck_requests ADD COLUMN attempt integer`,
    `UPDATE recheck_requests r SET attempt = o.attempt FROM operations o WHERE o.id = r.operation_id`,
    `CREATE INDEX recheck_requests_requested_at ON recheck_requests (requested_at)`,
  ],
  down: [`DROP INDEX recheck_requests_requested_at`, `ALTER TABLE recheck_requests DROP COLUMN attempt`],
}) {}
