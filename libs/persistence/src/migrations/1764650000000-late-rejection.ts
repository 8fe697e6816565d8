import { sqlMigration } from './sql-migration';

/**
 * The provider's rejection of a send that came back after the send was marked UNKNOWN (status model
 * LATE_REJECTION_TRIES) is kept on the operation — `rejected_at` and `rejection` (the answer as classified: `reason`,
 * `detail`, the provider's error code; never its body) — written by the statement that writes its
 * `operation.rejected_late` event. The statement that writes a person's VERIFIED requires `rejected_at IS NULL`
 * (`requiresUnrejected`), and a VERIFIED with one reads as contradicted (`verificationContradicted`: commit unknown).
 *
 * Rejections recorded before these columns existed wrote only their event: each operation gets the first such event's
 * time and data (one send per operation, so one answer), so a hold whose rejection is on file refuses a person's
 * VERIFIED after the upgrade too. The events it reads are few (a late 4xx is rare); no index is added for them.
 *
 * down() drops the columns: no earlier code reads them, and the events keep what they held.
 */
export class LateRejection1764650000000 extends sqlMigration('LateRejection1764650000000', {
  up: [
    `ALTER TABLE operations ADD COLUMN rejected_at timestamptz, ADD COLUMN rejection jsonb`,
    `
      UPDATE operations o
         SET rejected_at = e.created_at,
             rejection = e.data - 'after'
        FROM (SELECT DISTINCT ON (operation_id) operation_id, tenant_id, data, created_at FROM events
               WHERE type = 'operation.rejected_late' AND operation_id IS NOT NULL
               ORDER BY operation_id, created_at, seq) e
       WHERE o.id = e.operation_id AND o.tenant_id = e.tenant_id AND o.rejected_at IS NULL`,
  ],
  down: [`ALTER TABLE operations DROP COLUMN rejection, DROP COLUMN rejected_at`],
}) {}
