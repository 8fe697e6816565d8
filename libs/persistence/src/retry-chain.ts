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

/**
 * SQL: of the operations `ids` (an SQL expression of a text[] of tenant `tenant`'s operation ids), the retries whose
 * chain of retries (`retry_of`, followed back from the one each retries) holds a FAILED contradicted since: the
 * question of refutedUpTheChain, asked of a page at once. The chains of a page overlap (a list of executions shows the
 * latest retries of one request, each the retry of the one before): walked link by link for each operation, a page of
 * 200 retries of a long chain read the chain 200 times (a chain of 10,000 links: 2 million probes, seconds). Here the
 * links up the page's chains are walked once (`up`, UNION: a link reached again is not walked again), and from the
 * refuted ones among them down to their retries in turn (`down`, the unique index on retry_of): an operation of the
 * page found there has a refuted FAILED up its chain, itself excluded.
 */
export function refutedRetriesOf(ids: string, tenant: string): string {
  return `WITH RECURSIVE up AS (
       SELECT ro.id, ro.retry_of, ro.status, ro.acknowledged_at, ro.obligation
       FROM operations o JOIN operations ro ON ro.id = o.retry_of AND ro.tenant_id = ${tenant}
       WHERE o.tenant_id = ${tenant} AND o.id = ANY(${ids})
       UNION
       SELECT ro.id, ro.retry_of, ro.status, ro.acknowledged_at, ro.obligation
       FROM operations ro JOIN up c ON ro.id = c.retry_of AND ro.tenant_id = ${tenant}),
     down AS (
       SELECT o.id FROM up chain JOIN operations o ON o.retry_of = chain.id AND o.tenant_id = ${tenant}
       WHERE ${REFUTED_FAILED}
       UNION
       SELECT o.id FROM down d JOIN operations o ON o.retry_of = d.id AND o.tenant_id = ${tenant})
     SELECT o.id FROM operations o WHERE o.tenant_id = ${tenant} AND o.id = ANY(${ids})
       AND o.retry_of IS NOT NULL AND o.id IN (SELECT id FROM down)`;
}
