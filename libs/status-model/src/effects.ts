import { everSent } from './checks';
import { Commit, commitOf } from './commit';
import { OperationStatus, TerminalReason, VerificationMethodValue, isSettledOperation } from './operation';

/** The contract's §3 five values; kept as they were for existing clients (the finer split is in the added fields). */
export type EffectsSummary = 'all_verified' | 'partial' | 'none' | 'unverified' | 'unknown';

export interface Effects {
  counts: Record<OperationStatus, number>;
  summary: EffectsSummary;
  /** Operations per commit value (docs/semantics.md): what Verity's own requests committed. */
  commit: Record<Commit, number>;
  /** VERIFIED without sending: the source already held the requested state; Verity caused nothing. */
  no_change_required: number;
  /** Never handed to a connector: PREPARED, CANCELLED (a deny included) and MANUAL_REVIEW held before sending. */
  not_sent: number;
  /** The MANUAL_REVIEW operations among `not_sent`: held before sending, so no effect of theirs can exist yet. */
  held_not_sent: number;
}

export interface OperationForEffects {
  status: OperationStatus;
  verificationMethod: VerificationMethodValue;
  /** Above zero once the operation was handed to a connector. */
  attempt: number;
  noChangeRequired?: boolean;
  terminalReason?: TerminalReason | null;
  /** A FAILED contradicted since (`failureRefuted`): its effect may exist after all. */
  failureRefuted?: boolean;
  /** A VERIFIED the provider's late rejection contradicts (`verificationContradicted`): it may not have happened. */
  verificationContradicted?: boolean;
}

/** An effect in one of these may or may not exist in the world (never retry it blindly). */
export const UNCERTAIN_EFFECT_STATUSES: readonly OperationStatus[] = [
  OperationStatus.SENT,
  OperationStatus.UNKNOWN,
  OperationStatus.RECONCILING,
  OperationStatus.MANUAL_REVIEW,
];
const NO_EFFECT: readonly OperationStatus[] = [
  OperationStatus.FAILED,
  OperationStatus.CANCELLED,
  OperationStatus.PREPARED,
];

/**
 * The effects summary of docs/contract.md §3, separate from the execution status:
 * unknown — some effect may or may not exist; all_verified — every operation VERIFIED;
 * none — no effect exists; partial — some verified, some never happened; unverified — effects acknowledged
 * but not (all) read back. A MANUAL_REVIEW operation that was never sent is a hold, not an uncertain effect: it
 * counts with the operations that have no effect (a deny, too, is "not sent" — never proof of anything).
 */
export function summarizeEffects(operations: readonly OperationForEffects[]): Effects {
  const counts = Object.fromEntries(Object.values(OperationStatus).map((s) => [s, 0])) as Record<
    OperationStatus,
    number
  >;
  const commit: Record<Commit, number> = { not_dispatched: 0, committed: 0, rejected: 0, unknown: 0 };
  let uncertain = 0;
  let noEffect = 0;
  let heldNotSent = 0;
  let noChangeRequired = 0;
  let notSent = 0;
  for (const op of operations) {
    const sent = everSent(op);
    counts[op.status] += 1;
    const refuted = op.status === OperationStatus.FAILED && (op.failureRefuted ?? false);
    const contradicted = op.status === OperationStatus.VERIFIED && (op.verificationContradicted ?? false);
    commit[
      commitOf({
        status: op.status,
        everSent: sent,
        terminalReason: op.terminalReason,
        failureRefuted: refuted,
        verificationContradicted: contradicted,
      })
    ] += 1;
    if (op.status === OperationStatus.MANUAL_REVIEW && !sent) heldNotSent += 1;
    else if (UNCERTAIN_EFFECT_STATUSES.includes(op.status) || !isSettledOrQuiet(op) || refuted || contradicted) {
      uncertain += 1;
    }
    if ((NO_EFFECT.includes(op.status) && !refuted) || (op.status === OperationStatus.MANUAL_REVIEW && !sent)) {
      noEffect += 1;
    }
    if (op.status === OperationStatus.VERIFIED && (op.noChangeRequired ?? false)) noChangeRequired += 1;
    if (!sent && op.status !== OperationStatus.VERIFIED) notSent += 1;
  }
  const total = operations.length;
  let summary: EffectsSummary;
  if (uncertain > 0) {
    summary = 'unknown';
  } else if (total > 0 && counts.VERIFIED === total) {
    summary = 'all_verified';
  } else if (counts.VERIFIED === 0 && counts.ACKNOWLEDGED === 0) {
    summary = 'none';
  } else if (noEffect > 0) {
    summary = 'partial';
  } else {
    summary = 'unverified';
  }
  return {
    counts,
    summary,
    commit,
    no_change_required: noChangeRequired,
    not_sent: notSent,
    held_not_sent: heldNotSent,
  };
}

function isSettledOrQuiet(op: OperationForEffects): boolean {
  // PREPARED has no effect yet; an ACKNOWLEDGED awaiting read-back is still an effect we cannot vouch for.
  return op.status === OperationStatus.PREPARED || isSettledOperation(op.status, op.verificationMethod);
}
