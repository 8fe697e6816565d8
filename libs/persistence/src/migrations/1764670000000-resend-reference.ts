import { sqlMigration } from './sql-migration';

/**
 * `operations.resend_ref`: the caller's own name for the operation's effect at a provider that does not deduplicate
 * (a connector's `resendReference`, the SMS `client_ref`), written at intake; null for every other operation. Intake
 * refuses a new operation naming the reference of one that was sent and is not settled (a blind re-send, I5 across
 * executions). The partial index holds only such operations while they are unsettled — a handful — so intake's look is
 * one probe; `status` is indexed already (operations_unsettled), so no update loses HOT for it. Keep the status list
 * identical to RESEND_BLOCKING_STATUSES (libs/status-model), which INTAKE_SQL.insertExecution's predicate is made from.
 * Rows written before this migration have no reference: they hold nothing back.
 */
export class ResendReference1764670000000 extends sqlMigration('ResendReference1764670000000', {
  up: [
    `ALTER TABLE operations ADD COLUMN resend_ref text`,
    `
      CREATE INDEX operations_unsettled_resend_ref ON operations (tenant_id, connector, resend_ref)
      WHERE resend_ref IS NOT NULL AND status IN ('SENT', 'UNKNOWN', 'RECONCILING', 'MANUAL_REVIEW')`,
  ],
  down: [`DROP INDEX operations_unsettled_resend_ref`, `ALTER TABLE operations DROP COLUMN resend_ref`],
}) {}
