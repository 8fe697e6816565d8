/**
 * Reference 002's commit dimension: did this operation's own request commit an effect at the source? Separate from
 * the status (a lifecycle) and from observation (what is visible now). Derived, never stored.
 */
import { OperationStatus, TerminalReason } from './operation';

export type Commit = 'not_dispatched' | 'committed' | 'rejected' | 'unknown';

export const COMMIT_VALUES: readonly Commit[] = ['not_dispatched', 'committed', 'rejected', 'unknown'];

export const COMMIT_MEANING: Readonly<Record<Commit, string>> = {
  not_dispatched:
    'never handed to a connector (prepared, cancelled, denied, held before sending, or no change required): Verity caused nothing — which is not proof that nothing changed through another writer',
  committed: 'read-back (or a reviewer, with evidence) established that this request committed its effect',
  rejected: 'the provider rejected it, or the source proved the effect absent: this request committed nothing',
  unknown: 'sent, but evidence does not (yet) establish whether it committed — acceptance alone is not commitment',
};

export interface CommitRule {
  status: OperationStatus;
  /** Whether the operation was ever handed to a connector; `any` when it does not matter. */
  ever_sent: boolean | 'any';
  /** Only for this terminal reason; `any` otherwise. */
  terminal_reason: TerminalReason | 'any';
  commit: Commit;
}

const S = OperationStatus;
const rule = (
  status: OperationStatus,
  everSent: boolean | 'any',
  commit: Commit,
  terminalReason: TerminalReason | 'any' = 'any',
): CommitRule => ({ status, ever_sent: everSent, terminal_reason: terminalReason, commit });

/** First match wins. Served at GET /v1/status-model. */
export const COMMIT_RULES: readonly CommitRule[] = [
  rule(S.PREPARED, 'any', 'not_dispatched'),
  rule(S.CANCELLED, 'any', 'not_dispatched'),
  rule(S.VERIFIED, false, 'not_dispatched'),
  rule(S.VERIFIED, true, 'committed'),
  rule(S.FAILED, 'any', 'rejected'),
  rule(S.MANUAL_REVIEW, false, 'not_dispatched'),
  // Read-back found the effect; it only violates a checked invariant (002: a committed result, not a prevented one).
  rule(S.MANUAL_REVIEW, true, 'committed', TerminalReason.INTEGRITY_MISMATCH),
  rule(S.MANUAL_REVIEW, true, 'unknown'),
  rule(S.SENT, 'any', 'unknown'),
  rule(S.ACKNOWLEDGED, 'any', 'unknown'),
  rule(S.UNKNOWN, 'any', 'unknown'),
  rule(S.RECONCILING, 'any', 'unknown'),
];

/**
 * The statuses whose commit is `rejected` whatever else the operation holds, unless a record since refuted it
 * (`failureRefuted`): its own request committed nothing. A spending cap's `max_amount` does not count such an
 * operation of a connector whose FAILED is its own word, not the operation's (`failedSpendsNothing`; its
 * `max_operations` counts every send): a declined charge moved no money, and counted, it refused the charge its retry
 * or a corrected request then asked for. The window's SQL reads these statuses with the refutation's
 * record, so every rule that says `rejected` must hold for any `ever_sent` and any terminal reason (a spec checks it).
 */
export const REJECTED_COMMIT_STATUSES: readonly OperationStatus[] = [
  ...new Set(COMMIT_RULES.filter((r) => r.commit === 'rejected').map((r) => r.status)),
];

export function commitOf(op: {
  status: OperationStatus;
  everSent: boolean;
  terminalReason?: TerminalReason | null;
  /** A FAILED whose "no effect" was refuted since (`failureRefuted`): the evidence no longer says "rejected". */
  failureRefuted?: boolean;
  /**
   * A VERIFIED the provider's late rejection contradicts (`verificationContradicted`): the evidence no longer says
   * "committed".
   */
  verificationContradicted?: boolean;
}): Commit {
  if (op.failureRefuted && op.status === OperationStatus.FAILED) return 'unknown';
  if (op.verificationContradicted && op.status === OperationStatus.VERIFIED) return 'unknown';
  const found = COMMIT_RULES.find(
    (r) =>
      r.status === op.status &&
      (r.ever_sent === 'any' || r.ever_sent === op.everSent) &&
      (r.terminal_reason === 'any' || r.terminal_reason === op.terminalReason),
  );
  // The table covers every status (a spec proves it), so this is only the type's due.
  return found?.commit ?? 'unknown';
}
