import { sqlMigration } from './sql-migration';

/**
 * A FAILED operation whose source showed the effect after a reviewer resolved it is read as refuted from its row
 * (`recovery_obligation.effect_shown_after_failed`, status model `failureRefuted`: commit unknown, retry forbidden).
 * Re-checks recorded before that key existed wrote only their event (`operation.rechecked` with `after: 'FAILED'`): without
 * this, those operations still showed `commit: "rejected"` and `retry: "safe"` (only the retry endpoint, which reads the
 * events, refused). Each gets the key from the newest such event whose read showed the effect (READS_SHOWING_THE_EFFECT).
 * The events it reads are the few in the partial index events_webhook_after_failed.
 *
 * down() leaves the key: it is data written since by the re-check too, which no earlier code reads, and removing it
 * would also erase what re-checks after the upgrade recorded.
 */
export class EffectShownAfterFailed1764630000000 extends sqlMigration('EffectShownAfterFailed1764630000000', {
  up: [
    `
      UPDATE operations o
         SET obligation = coalesce(o.obligation, '{}'::jsonb) || jsonb_build_object(
               'effect_shown_after_failed',
               jsonb_build_object('result', e.data->>'result',
                                  'at', to_char(e.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
        FROM (SELECT DISTINCT ON (operation_id) operation_id, tenant_id, data, created_at FROM events
               WHERE type = 'operation.rechecked' AND data->>'after' = 'FAILED'
                 AND data->>'result' IN ('found', 'mismatch', 'field_missing')
               ORDER BY operation_id, created_at DESC, seq DESC) e
       WHERE o.id = e.operation_id AND o.tenant_id = e.tenant_id AND o.status = 'FAILED'
         AND NOT (coalesce(o.obligation, '{}'::jsonb) ? 'effect_shown_after_failed')`,
  ],
  // Nothing to undo in the schema (see above).
  down: [],
}) {}
