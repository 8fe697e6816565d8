/**
 * The operation state machine of docs/contract.md §2: whether an effect occurred in the world.
 * This file is data plus small functions; it imports nothing so that every other part can depend on it.
 */

export enum OperationStatus {
  PREPARED = 'PREPARED',
  SENT = 'SENT',
  ACKNOWLEDGED = 'ACKNOWLEDGED',
  VERIFIED = 'VERIFIED',
  UNKNOWN = 'UNKNOWN',
  RECONCILING = 'RECONCILING',
  FAILED = 'FAILED',
  MANUAL_REVIEW = 'MANUAL_REVIEW',
  CANCELLED = 'CANCELLED',
}

export const OPERATION_STATUSES: readonly OperationStatus[] = Object.values(OperationStatus);

export enum TerminalReason {
  CONNECTOR_ERROR = 'CONNECTOR_ERROR',
  CONNECTOR_REJECTED = 'CONNECTOR_REJECTED',
  KNOWLEDGE_CONFLICT = 'KNOWLEDGE_CONFLICT',
  STALE_REPLICA = 'STALE_REPLICA',
  FIELD_MISSING = 'FIELD_MISSING',
  SOURCE_UNREACHABLE = 'SOURCE_UNREACHABLE',
  INTEGRITY_MISMATCH = 'INTEGRITY_MISMATCH',
  /** This project's: a reviewer denied the approval; the operation was never sent (not proof that nothing changed). */
  DENIED = 'DENIED',
  /** This project's: reconciliation read the authoritative source and the effect is not there (no effect exists). */
  PROVEN_ABSENT = 'PROVEN_ABSENT',
}

export const TERMINAL_REASONS: readonly TerminalReason[] = Object.values(TerminalReason);

export enum VerificationMethod {
  READ_AFTER_WRITE = 'read_after_write',
}

/** On the wire, an empty verification method is `""`: VERIFIED is then unreachable without a human. */
export type VerificationMethodValue = VerificationMethod | '';

export enum RetryRule {
  NONE = 'none',
  WAIT = 'wait',
  NOT_NEEDED = 'not_needed',
  FORBIDDEN = 'forbidden',
  CONSOLE = 'console',
  SAFE = 'safe',
}

export interface OperationStatusInfo {
  terminal: boolean;
  retry: RetryRule;
  meaning: string;
}

export const OPERATION_STATUS_INFO: Readonly<Record<OperationStatus, OperationStatusInfo>> = {
  PREPARED: { terminal: false, retry: RetryRule.NONE, meaning: 'intent recorded, not sent' },
  SENT: { terminal: false, retry: RetryRule.WAIT, meaning: 'handed to the connector (committed before the call)' },
  ACKNOWLEDGED: { terminal: false, retry: RetryRule.WAIT, meaning: 'the connector replied: transport only' },
  VERIFIED: { terminal: true, retry: RetryRule.NOT_NEEDED, meaning: 'confirmed against the source' },
  UNKNOWN: { terminal: false, retry: RetryRule.FORBIDDEN, meaning: 'outcome unknown (timeout, reset, 5xx, crash)' },
  RECONCILING: { terminal: false, retry: RetryRule.WAIT, meaning: 'determining the final state from the source' },
  FAILED: { terminal: true, retry: RetryRule.SAFE, meaning: 'explicit rejection or proven absence: no effect' },
  MANUAL_REVIEW: { terminal: false, retry: RetryRule.CONSOLE, meaning: 'held for a human, with a recovery obligation' },
  CANCELLED: { terminal: true, retry: RetryRule.SAFE, meaning: 'cancelled before it was ever sent' },
};

/** Who asks for a transition. Some moves are reserved for a human resolution. */
export type Actor = 'system' | 'human';

export interface OperationTransitionRule {
  from: OperationStatus;
  to: OperationStatus;
  /** Reasons that may accompany the move; `required` means one of them must. */
  reasons: readonly TerminalReason[];
  reasonRequired: boolean;
  /** Only a human resolution (with evidence) may take this move. */
  humanOnly: boolean;
  /** Only for an operation that was never handed to a connector. */
  neverSentOnly: boolean;
  /** Only for an operation that was handed to a connector: there is an outcome to judge. */
  sentOnly: boolean;
  /**
   * Refused while the operation is held for one of these reasons: the hold itself is evidence against the move (a
   * read-back that found the charge with another amount cannot end in "no effect exists").
   */
  refusedWhenHeldFor: readonly TerminalReason[];
  /**
   * Refused once the provider acknowledged the send (a 2xx with its reference): the provider's own word that the effect
   * exists is evidence against the move, whatever a later read shows.
   */
  refusedWhenAcknowledged: boolean;
  /**
   * Refused once a read of the source made while the operation was held showed the effect (a re-check that found it,
   * or found it with other values), whatever a later read shows: a source that showed the effect and then does not is
   * lagging or flapping, and the record of what it showed is evidence against the move.
   */
  refusedWhenEffectShown: boolean;
  /**
   * Refused once the provider's rejection of the send is on file (a 4xx that came back after the send was marked
   * UNKNOWN: `rejected_at`, LATE_REJECTION_TRIES): the provider's own word that it did not take the request is evidence
   * against the move, whatever a person's evidence says. Only a person's move is judged by it; a read of the source
   * that finds the effect is recorded as it is (and the record then shows both: commit `unknown`).
   */
  refusedWhenRejected: boolean;
  /**
   * A human-only move the system may also take, but only while held for one of these reasons and only with
   * read-after-write evidence: a re-check that finds the effect once a lagging or unreachable source answers.
   */
  systemWhenHeldFor: readonly TerminalReason[];
  /**
   * A human-only move the system also takes once the operation's execution has ended unreleasable (cancelled, expired
   * or failed): a held operation that was never sent can then never be released, so it ends with the execution
   * instead of waiting in the review queue for a decision that has only one answer.
   */
  systemWhenExecutionEnded: boolean;
  extension: boolean;
  why: string;
}

const MANUAL_REVIEW_REASONS: readonly TerminalReason[] = [
  TerminalReason.INTEGRITY_MISMATCH,
  TerminalReason.FIELD_MISSING,
  TerminalReason.STALE_REPLICA,
  TerminalReason.SOURCE_UNREACHABLE,
  TerminalReason.CONNECTOR_ERROR,
  TerminalReason.KNOWLEDGE_CONFLICT,
];

function rule(
  from: OperationStatus,
  to: OperationStatus,
  why: string,
  options: Partial<Omit<OperationTransitionRule, 'from' | 'to' | 'why'>> = {},
): OperationTransitionRule {
  return {
    from,
    to,
    why,
    reasons: options.reasons ?? [],
    reasonRequired: options.reasonRequired ?? false,
    humanOnly: options.humanOnly ?? false,
    neverSentOnly: options.neverSentOnly ?? false,
    sentOnly: options.sentOnly ?? false,
    refusedWhenHeldFor: options.refusedWhenHeldFor ?? [],
    refusedWhenAcknowledged: options.refusedWhenAcknowledged ?? false,
    refusedWhenEffectShown: options.refusedWhenEffectShown ?? false,
    refusedWhenRejected: options.refusedWhenRejected ?? false,
    systemWhenHeldFor: options.systemWhenHeldFor ?? [],
    systemWhenExecutionEnded: options.systemWhenExecutionEnded ?? false,
    extension: options.extension ?? false,
  };
}

const S = OperationStatus;
const R = TerminalReason;

/**
 * Holds whose own read found a record of the effect: with other values (INTEGRITY_MISMATCH), or without the field that
 * tells its state (FIELD_MISSING). What was found is on file: the effect exists at the source, so nothing may record
 * that it did not happen — not even after a later read stops showing it — and such a later read does not refute a
 * person's "it happened" either.
 */
export const HOLDS_WITH_A_RECORD_ON_FILE: readonly TerminalReason[] = [R.INTEGRITY_MISMATCH, R.FIELD_MISSING];

/** Exactly the table of docs/contract.md §2: the reference diagram first, then this project's extension. */
export const OPERATION_TRANSITIONS: readonly OperationTransitionRule[] = [
  rule(S.PREPARED, S.SENT, 'committed before the connector is called'),
  rule(S.PREPARED, S.MANUAL_REVIEW, 'held before sending (e.g. a knowledge conflict on an irreversible operation)', {
    reasons: [R.KNOWLEDGE_CONFLICT, R.SOURCE_UNREACHABLE, R.FIELD_MISSING],
    reasonRequired: true,
  }),
  rule(S.PREPARED, S.CANCELLED, 'cancelled before it was ever sent (DENIED when a reviewer denied the approval)', {
    reasons: [R.DENIED],
  }),
  rule(S.SENT, S.ACKNOWLEDGED, 'the connector replied'),
  rule(S.SENT, S.UNKNOWN, 'timeout, reset, 5xx, or a worker found the operation already SENT', {
    reasons: [R.CONNECTOR_ERROR],
    reasonRequired: true,
  }),
  rule(S.SENT, S.FAILED, 'explicit rejection, or proof that nothing was delivered', {
    reasons: [R.CONNECTOR_REJECTED, R.SOURCE_UNREACHABLE],
    reasonRequired: true,
  }),
  rule(S.ACKNOWLEDGED, S.VERIFIED, 'read-after-write found the effect'),
  rule(S.ACKNOWLEDGED, S.UNKNOWN, 'read-back did not find the effect once the settle window had passed', {
    reasons: [R.CONNECTOR_ERROR],
  }),
  rule(S.UNKNOWN, S.RECONCILING, 'the reconciler reads the source'),
  rule(S.RECONCILING, S.VERIFIED, 'the source holds the effect'),
  rule(S.RECONCILING, S.FAILED, 'the authoritative source proves the effect absent', {
    reasons: [R.PROVEN_ABSENT],
    reasonRequired: true,
  }),
  rule(S.PREPARED, S.VERIFIED, 'no change required: the source already holds the requested state', {
    extension: true,
  }),
  rule(S.ACKNOWLEDGED, S.MANUAL_REVIEW, 'read-back violates a checked invariant or cannot conclude', {
    reasons: [R.INTEGRITY_MISMATCH, R.FIELD_MISSING, R.STALE_REPLICA, R.SOURCE_UNREACHABLE],
    reasonRequired: true,
    extension: true,
  }),
  rule(S.RECONCILING, S.UNKNOWN, 'inconclusive read, scheduled again with backoff', { extension: true }),
  rule(S.RECONCILING, S.MANUAL_REVIEW, 'reconciliation budget exhausted', {
    reasons: MANUAL_REVIEW_REASONS,
    reasonRequired: true,
    extension: true,
  }),
  rule(S.UNKNOWN, S.MANUAL_REVIEW, 'reconciliation deadline passed, or the source cannot be read', {
    reasons: MANUAL_REVIEW_REASONS,
    reasonRequired: true,
    extension: true,
  }),
  rule(
    S.MANUAL_REVIEW,
    S.VERIFIED,
    'a human resolution, with evidence, never when the provider rejected the send; or a re-check that reads the effect back',
    {
      humanOnly: true,
      sentOnly: true,
      refusedWhenRejected: true,
      systemWhenHeldFor: [R.SOURCE_UNREACHABLE, R.STALE_REPLICA],
      extension: true,
    },
  ),
  rule(
    S.MANUAL_REVIEW,
    S.FAILED,
    'a human resolution, with evidence; never when the source showed the effect or the provider acknowledged it',
    {
      humanOnly: true,
      sentOnly: true,
      refusedWhenHeldFor: HOLDS_WITH_A_RECORD_ON_FILE,
      refusedWhenAcknowledged: true,
      refusedWhenEffectShown: true,
      extension: true,
    },
  ),
  rule(S.MANUAL_REVIEW, S.SENT, 'a human releases an operation that was never sent', {
    humanOnly: true,
    neverSentOnly: true,
    extension: true,
  }),
  rule(S.MANUAL_REVIEW, S.CANCELLED, 'a human cancels an operation that was never sent, or its execution ended', {
    reasons: [R.DENIED],
    humanOnly: true,
    neverSentOnly: true,
    systemWhenExecutionEnded: true,
    extension: true,
  }),
];

const RULES_BY_MOVE = new Map<string, OperationTransitionRule>(
  OPERATION_TRANSITIONS.map((r) => [`${r.from}>${r.to}`, r]),
);

export function operationTransitionRule(
  from: OperationStatus,
  to: OperationStatus,
): OperationTransitionRule | undefined {
  return RULES_BY_MOVE.get(`${from}>${to}`);
}

export function allowedOperationTargets(from: OperationStatus): OperationStatus[] {
  return OPERATION_TRANSITIONS.filter((r) => r.from === from).map((r) => r.to);
}

export function isTerminalOperation(status: OperationStatus): boolean {
  return OPERATION_STATUS_INFO[status].terminal;
}

export function retryRuleOf(status: OperationStatus): RetryRule {
  return OPERATION_STATUS_INFO[status].retry;
}

/**
 * The retry rule an operation shows: its status', except `forbidden` where the record's final status is contradicted
 * since and the effect may exist — a FAILED refuted (failureRefuted: a re-send could make it twice), and a VERIFIED
 * the provider's late rejection contradicts (verificationContradicted: not "done, not needed" any more, but not "no
 * effect" either — the read found one; its commit is `unknown`, as an UNKNOWN's is) — and where the operation is a
 * retry made on the word of such a FAILED (`retryRefuted`: the one it retries, or one up its chain of retries, was
 * refuted since): a retry of it rests on the same word, and is refused (409 effect-exists) as the send would refuse it.
 */
export function operationRetryRule(op: {
  status: OperationStatus;
  failureRefuted: boolean;
  verificationContradicted?: boolean;
  retryRefuted?: boolean;
  /** Its chain of retries (it included) holds DENIAL_LIMIT denials, or more links than counted (`denialLimitReached`). */
  denialLimitReached?: boolean;
}): RetryRule {
  if (op.failureRefuted && op.status === S.FAILED) return RetryRule.FORBIDDEN;
  if (op.verificationContradicted && op.status === S.VERIFIED) return RetryRule.FORBIDDEN;
  if (op.retryRefuted && canRetry(op.status)) return RetryRule.FORBIDDEN;
  if (op.denialLimitReached && canRetry(op.status)) return RetryRule.FORBIDDEN;
  return retryRuleOf(op.status);
}

/**
 * How many times reviewers may deny one request (an operation and its chain of retries, `retry_of` followed back) before
 * a retry of it is refused (409 denial-limit-reached, rule `denial_limit`): a denied operation's retry asks the same
 * thing again, and deny → retry → ask again must not go on until a tired reviewer approves what colleagues denied.
 */
export const DENIAL_LIMIT = 3;

/**
 * A retry of an operation whose chain of retries (it included) holds `denials` denials is refused (`DENIAL_LIMIT`).
 * `uncounted`: the chain goes on past the links its denials were counted over — it is not known to be under the limit,
 * and is refused too: retries cancelled unsent (an agent's own retry and cancel, no reviewer asked) would otherwise pad
 * a chain until its denials lay past the count.
 */
export function denialLimitReached(denials: number, uncounted = false): boolean {
  return uncounted || denials >= DENIAL_LIMIT;
}

/** I5: a retry (a new operation with `retry_of`) is allowed only where the rule says it is safe. */
export function canRetry(status: OperationStatus): boolean {
  return retryRuleOf(status) === RetryRule.SAFE;
}

/**
 * Settled means no automatic step will move the operation again: terminal, held for a human, or
 * ACKNOWLEDGED with no way to read it back (its honest end).
 */
export function isSettledOperation(status: OperationStatus, verificationMethod: VerificationMethodValue): boolean {
  if (isTerminalOperation(status) || status === S.MANUAL_REVIEW) return true;
  return status === S.ACKNOWLEDGED && verificationMethod !== VerificationMethod.READ_AFTER_WRITE;
}

/**
 * Where a move that names no terminal reason leaves the operation's standing: UNKNOWN and RECONCILING, between which
 * the reconciler moves an outcome a connector error left uncertain (its CONNECTOR_ERROR) until a read settles it — the
 * outcome is still the uncertain one that reason explains. Every other move writes its own reason, null when it names
 * none: a settled status is explained by the move into it, not by a reason from the way, and no reason explains a
 * PREPARED, a SENT or an ACKNOWLEDGED awaiting its read-back (a released hold's reason no longer does).
 */
export function keepsTerminalReason(to: OperationStatus): boolean {
  return to === S.UNKNOWN || to === S.RECONCILING;
}

/**
 * Nothing, automatic or human, will move the operation again: a terminal status, or ACKNOWLEDGED with no way to read
 * it back (its honest end). Narrower than settled: a MANUAL_REVIEW still awaits a person. A VERIFIED effect may still
 * be observed later, but observation never changes a status.
 */
export function isFinalOperation(status: OperationStatus, verificationMethod: VerificationMethodValue): boolean {
  return status !== S.MANUAL_REVIEW && isSettledOperation(status, verificationMethod);
}

/** Statuses in which an operation is final whatever its verification (isFinalOperation). */
export const FINAL_OPERATION_STATUSES: readonly OperationStatus[] = OPERATION_STATUSES.filter((status) =>
  isFinalOperation(status, VerificationMethod.READ_AFTER_WRITE),
);
/** … and those final only where nothing reads it back (ACKNOWLEDGED, its honest end). */
export const FINAL_WITHOUT_READ_BACK_STATUSES: readonly OperationStatus[] = OPERATION_STATUSES.filter(
  (status) => !FINAL_OPERATION_STATUSES.includes(status) && isFinalOperation(status, ''),
);
