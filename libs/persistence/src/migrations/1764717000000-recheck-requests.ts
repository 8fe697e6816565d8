import { sqlMigration } from './sql-migration';

/**
 * The re-checks reviewers asked for (`POST /v1/operations/{id}/recheck`), one row per request: who asked (their key),
 * for which operation, and once its re-check job has used it (`used_at`). The job carries only the request's id; the
 * reconciler claims the row (one compare-and-set on `used_at`) before it writes anything in the reviewer's name. A job
 * whose data names a reviewer — edited or replayed on a writable Bull Board — spoke for a person who asked once or never.
 */
export class RecheckRequests1764717000000 extends sqlMigration('RecheckRequests1764717000000', {
  up: [
    `CREATE TABLE recheck_requests (
       id text PRIMARY KEY,
       tenant_id text NOT NULL,
       operation_id text NOT NULL REFERENCES operations (id) ON DELETE CASCADE,
       requested_by text NOT NULL,
       requested_at timestamptz NOT NULL DEFAULT clock_timestamp(),
       used_at timestamptz
     )`,
    `CREATE INDEX recheck_requests_operation ON recheck_requests (operation_id)`,
  ],
  down: [`DROP TABLE recheck_requests`],
}) {}
