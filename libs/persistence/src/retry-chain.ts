import { OperationStatus } from '@verity/status-model';

/** A link of the chain (`chain`: status, acknowledged_at, obligation) that is a FAILED contradicted since. */
const REFUTED_FAILED = `chain.status = '${OperationStatus.FAILED}'
            AND (chain.acknowledged_at IS NOT NULL
                 OR coalesce(chain.obligation, '{}'::jsonb) ? 'effect_shown_after_failed')`;

/**
 * SQL: whether the operation `first` (an SQL expression naming an operation id of tenant `tenant`), or one up its chain
 * of retries (`retry_of`, followed back), is a FAILED whose "no effect exists" was contradicted since — the provider's
 * 2xx came back late (`acknowledged_at`), or a read of its source after the FAILED showed the effect (the status
 * model's `failureRefuted`). A retry made on the word of any of them would make the effect twice. One probe of the
 * primary key per link. The send guard, the retry intake and the release offer all ask this one question.
 */
export function refutedUpTheChain(first: string, tenant: string): string {
  return `EXISTS (
          WITH RECURSIVE chain AS (
            SELECT ro.id, ro.retry_of, ro.status, ro.acknowledged_at, ro.obligation
            FROM operations ro WHERE ro.id = ${first} AND ro.tenant_id = ${tenant}
            UNION
            SELECT ro.id, ro.retry_of, ro.status, ro.acknowledged_at, ro.obligation
            FROM operations ro JOIN chain c ON ro.id = c.retry_of AND ro.tenant_id = ${tenant})
          SELECT 1 FROM chain WHERE ${REFUTED_FAILED})`;
}

/**
 * refutedUpTheChain as the statement that commits SENT asks it: each link share-locked and read with a fresh snapshot
 * (`verity_retry_chain_locked`), so a refutation being written is waited for and then seen, and one written later waits
 * for the send's commit. From the statement's own snapshot, a SENT that waited for its operation's row committed after
 * a refutation made meanwhile.
 */
export function refutedUpTheChainLocked(first: string, tenant: string): string {
  return `EXISTS (SELECT 1 FROM verity_retry_chain_locked(${first}, ${tenant}) chain WHERE ${REFUTED_FAILED})`;
}
