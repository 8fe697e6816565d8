import { sqlMigration } from './sql-migration';

/**
 * The links of an operation's chain of retries (`p_first` and each `retry_of` followed back, of tenant `p_tenant`), as
 * the statement that commits SENT judges "the FAILED it retries was refuted since" (the send guard's `retry_refuted`):
 * each link is share-locked and read by a query of its own — a fresh snapshot, not the calling statement's (VOLATILE).
 * A write that refutes a link (a late 2xx, a read that shows the effect) updates that row, so it either waits for the
 * send to commit or is seen by it. A recursive query cannot lock rows; read from the statement's snapshot, a retry
 * whose SENT statement waited for its own row (held by another writer) was sent after its original was refuted. The
 * status-model question asked of the links stays in the caller's SQL (`refutedUpTheChainLocked`).
 */
export class RetryChainLocked1764716000000 extends sqlMigration('RetryChainLocked1764716000000', {
  up: [
    `
      CREATE FUNCTION verity_retry_chain_locked(p_first text, p_tenant text)
      RETURNS TABLE (id text, status text, acknowledged_at timestamptz, obligation jsonb)
      LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        v_next text := p_first;
        v_seen text[] := '{}';
        v_retry_of text;
      BEGIN
        WHILE v_next IS NOT NULL AND NOT v_next = ANY (v_seen) LOOP
          v_seen := v_seen || v_next;
          SELECT o.id, o.status, o.acknowledged_at, o.obligation, o.retry_of
            INTO id, status, acknowledged_at, obligation, v_retry_of
            FROM operations o WHERE o.id = v_next AND o.tenant_id = p_tenant FOR SHARE;
          EXIT WHEN NOT FOUND;
          RETURN NEXT;
          v_next := v_retry_of;
        END LOOP;
      END
      $$`,
  ],
  down: [`DROP FUNCTION verity_retry_chain_locked(text, text)`],
}) {}
