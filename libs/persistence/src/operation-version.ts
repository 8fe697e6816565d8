import { OperationStatus } from '@verity/status-model';
import { refutedUpTheChain, refutedUpTheChainLocked } from './retry-chain';
import { approvalPolicyOf } from './tenant-policy';

/**
 * SQL: whether the tenant's approval policy decides what a person's decision on the operation (a row under `alias`)
 * does — it has no approval on record and the agent asked for none, so only a rule of the policy makes it need one: an
 * approve or a deny of a PREPARED one is taken only if a rule covers it, a release (SENT) of one held before it was ever
 * sent also grants the approval a rule requires (the status model's `approvalDecidable`, `releaseGrantsApproval`).
 * Elsewhere the policy changes nothing a decision does: an approval on record or asked for by the agent stands either
 * way, and a held operation that was sent is not released.
 */
function approvalPolicyDecides(alias: string): string {
  return `coalesce(${alias}.approval, 'null'::jsonb) = 'null'::jsonb AND NOT ${alias}.requires_approval
          AND (${alias}.status = '${OperationStatus.PREPARED}'
               OR (${alias}.status = '${OperationStatus.MANUAL_REVIEW}' AND ${alias}.attempt = 0))`;
}

/**
 * The version of an operation as a person decides on it (the `ETag` of `GET /v1/operations/{id}`), as SQL over a row of
 * `operations` under `alias`: a digest of everything a decision is taken on — the status and why it is held, the attempt
 * (a second hold of the same operation has another), the approval, the obligation with its resolution, investigations
 * and what a re-check showed, the evidence, and whether the provider's answer or rejection is on file. Computed from
 * the row itself, so the statement that writes a decision compares it with the row it locks (compare-and-set), never
 * with a read made before. Left out: what changes while nothing about the decision does — the count of automatic
 * re-checks that found nothing new, and the obligation's escalation (a reviewer's page stays current through both).
 * Also whether a FAILED up its chain of retries was contradicted since (`refutedUpTheChain`: another row, which takes
 * its release off and forbids its retry): the digest is then of the same text with ` retry_refuted` after it, so the
 * version of every other operation reads as before.
 * And, where the tenant's approval policy decides what a decision does (`approvalPolicyDecides`), that policy as stored
 * (`approvalPolicyOf`: its approval keys, not who owns obligations): then ` approval_policy ` and the policy follow, so
 * a rule an admin adds or removes changes the version of those operations, and of no other. Without it, a page read
 * before a rule was added released an operation with a still-valid ETag and the release granted an approval the page
 * never showed.
 * `obligation`, given, is an expression that stands for the row's obligation (a version it had before).
 * `chain: 'locked'` is for a statement that writes (or locks) on the version: the links are share-locked and read with a
 * fresh snapshot (`refutedUpTheChainLocked`), so a refutation committed while the statement waited for its own row is
 * seen, and one written later waits for its commit; so is the tenant's row (FOR SHARE: the newest committed policy, and
 * a policy change waits for the decision's commit). A decision share-locks that row by a statement of its own first
 * (TransitionService.decide): waiting for it inside the decision's statement, the statement kept its earlier snapshot
 * of everything else (an execution cancelled meanwhile). Read from the statement's snapshot, a decision that waited for its
 * row passed an If-Match naming the version before a refutation committed meanwhile.
 */
export function operationVersionOf(alias: string, obligation?: string, chain: 'read' | 'locked' = 'read'): string {
  const column = (name: string) => `${alias}.${name}`;
  const policy = `(SELECT ${approvalPolicyOf('vt')} FROM tenants vt WHERE vt.id = ${column('tenant_id')}${chain === 'locked' ? ' FOR SHARE' : ''})`;
  return `md5(jsonb_build_array(${column('status')}, ${column('terminal_reason')}, ${column('attempt')}, ${column('approval')},
       ${obligation === undefined ? column('obligation') : `(${obligation})`} - 'rechecks' - 'escalated_at', ${column('evidence')},
       ${column('acknowledged_at')} IS NOT NULL, ${column('rejected_at')} IS NOT NULL)::text
       || CASE WHEN ${(chain === 'locked' ? refutedUpTheChainLocked : refutedUpTheChain)(column('retry_of'), column('tenant_id'))} THEN ' retry_refuted' ELSE '' END
       || CASE WHEN ${approvalPolicyDecides(alias)} THEN ' approval_policy ' || coalesce(${policy}, '') ELSE '' END)`;
}
