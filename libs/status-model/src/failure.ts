/**
 * The structured failure (docs/semantics.md) (`code`, `phase`, `category`, `retryable`, `message`, `at`), carried wherever
 * something did not go as asked: a failed, expired or cancelled execution, and an operation that ended FAILED or
 * CANCELLED or is held in MANUAL_REVIEW. Operation failures are derived, never stored: from the status, the
 * terminal reason and the cause recorded in the event that made the last move — so they cannot disagree with the log.
 */
import { ExecutionStatus } from './execution';
import { OperationStatus, TerminalReason } from './operation';
import { everSent } from './checks';

/**
 * Who or what made it go differently, which says who can act:
 * caller_error — the request or the caller's own action (the caller can correct it);
 * provider_rejected — the third party explicitly refused this request;
 * transient — a network, deadline or availability condition that may pass;
 * internal — Verity itself (a row it cannot explain; report it);
 * policy — a rule or a reviewer's authority did not permit it (approval, spending cap, dependency rule, the tenant's
 *   egress allowlist);
 * human — a person decided the outcome, or must.
 */
export type FailureCategory = 'caller_error' | 'provider_rejected' | 'transient' | 'internal' | 'policy' | 'human';

export const FAILURE_CATEGORIES: readonly FailureCategory[] = [
  'caller_error',
  'provider_rejected',
  'transient',
  'internal',
  'policy',
  'human',
];

/** Where an operation stopped: before sending (precondition, approval, dispatch) or after (verification...). */
export type OperationFailurePhase =
  'precondition' | 'approval' | 'dispatch' | 'verification' | 'reconciliation' | 'review';

export interface Failure<Phase extends string = string> {
  code: string;
  phase: Phase;
  category: FailureCategory;
  /** True when submitting the same request again, unchanged, may succeed without anyone acting first. */
  retryable: boolean;
  message: string;
  at: string;
}

/** The failure of an execution: its phase is the execution status it was in. */
export type ExecutionFailure = Failure<ExecutionStatus>;
export type OperationFailure = Failure<OperationFailurePhase>;

export interface FailureCodeInfo {
  applies_to: 'execution' | 'operation';
  /** The operation status it describes (execution codes: the execution status). */
  status: string;
  phase: string;
  category: FailureCategory;
  retryable: boolean;
  message: string;
}

const op = (
  status: OperationStatus,
  phase: OperationFailurePhase | 'verification or reconciliation',
  category: FailureCategory,
  retryable: boolean,
  message: string,
): FailureCodeInfo => ({ applies_to: 'operation', status, phase, category, retryable, message });

const exe = (
  status: ExecutionStatus,
  phase: string,
  category: FailureCategory,
  retryable: boolean,
  message: string,
): FailureCodeInfo => ({ applies_to: 'execution', status, phase, category, retryable, message });

const S = OperationStatus;
const E = ExecutionStatus;

/** The code table (docs/api.md prints it; GET /v1/status-model serves it). */
export const FAILURE_CODES = {
  invalid_request: exe(E.FAILED, 'validating', 'caller_error', false, 'the request did not validate'),
  deadline_exceeded: exe(E.EXPIRED, 'any', 'transient', true, 'the deadline passed before the work settled'),
  approval_timed_out: exe(
    E.EXPIRED,
    'waiting_for_approval',
    'human',
    true,
    'the deadline passed while an approval was still awaited',
  ),
  cancelled_by_caller: exe(E.CANCELLED, 'any', 'caller_error', true, 'the caller cancelled the execution'),
  connector_rejected: op(S.FAILED, 'dispatch', 'provider_rejected', false, 'the provider explicitly rejected it'),
  never_delivered: op(S.FAILED, 'dispatch', 'transient', true, 'provably never delivered: the source was unreachable'),
  egress_refused: op(
    S.FAILED,
    'dispatch',
    'policy',
    false,
    "never sent: the tenant's egress policy does not allow the target",
  ),
  secret_not_set: op(
    S.FAILED,
    'dispatch',
    'policy',
    false,
    'never sent: a secret the call names is not set for this tenant',
  ),
  secret_not_bound: op(
    S.FAILED,
    'dispatch',
    'policy',
    false,
    'never sent: a secret the call names may not be sent to its host',
  ),
  proven_absent: op(
    S.FAILED,
    'reconciliation',
    'transient',
    true,
    'the outcome was unknown; reading the source proved the effect absent',
  ),
  resolved_failed: op(S.FAILED, 'review', 'human', false, 'a reviewer resolved it FAILED, with evidence'),
  approval_denied: op(S.CANCELLED, 'approval', 'policy', false, 'a reviewer denied the approval; it was never sent'),
  dependency_not_done: op(
    S.CANCELLED,
    'dispatch',
    'policy',
    false,
    'never sent: an operation it depends on failed, was cancelled, or its VERIFIED was contradicted',
  ),
  spending_cap_reached: op(S.CANCELLED, 'dispatch', 'policy', true, 'never sent: a spending cap was reached'),
  amount_above_cap: op(
    S.CANCELLED,
    'dispatch',
    'policy',
    false,
    'never sent: its amount alone is above a spending cap’s max_amount, so no window has room for it',
  ),
  spending_cap_unmeasurable: op(
    S.CANCELLED,
    'dispatch',
    'policy',
    false,
    'never sent: its amount cannot be counted against a spending cap (not a positive number, or another currency)',
  ),
  reference_unsettled: op(
    S.CANCELLED,
    'dispatch',
    'policy',
    true,
    'never sent: another send of its reference (SMS client_ref) was not settled: a re-send could make it twice',
  ),
  retry_refuted: op(
    S.CANCELLED,
    'dispatch',
    'policy',
    false,
    'never sent: the FAILED it retries was contradicted since (a late 2xx, or its source showed the effect)',
  ),
  execution_cancelled: op(S.CANCELLED, 'dispatch', 'caller_error', true, 'never sent: the execution was cancelled'),
  execution_expired: op(S.CANCELLED, 'dispatch', 'transient', true, 'never sent: the execution expired'),
  execution_invalid: op(S.CANCELLED, 'dispatch', 'caller_error', false, 'never sent: the execution was invalid'),
  resolved_cancelled: op(S.CANCELLED, 'review', 'human', false, 'a reviewer cancelled it; it was never sent'),
  knowledge_conflict: op(
    S.MANUAL_REVIEW,
    'precondition',
    'caller_error',
    false,
    'held before sending: the source differs from the expected state',
  ),
  precondition_unreadable: op(
    S.MANUAL_REVIEW,
    'precondition',
    'transient',
    false,
    'held before sending: the precondition could not be read',
  ),
  integrity_mismatch: op(
    S.MANUAL_REVIEW,
    'verification or reconciliation',
    'human',
    false,
    'the effect exists but violates a checked invariant',
  ),
  verification_inconclusive: op(
    S.MANUAL_REVIEW,
    'verification',
    'transient',
    false,
    'the effect could not be confirmed: the source was unreachable, lagging or missing a field',
  ),
  outcome_unknown: op(
    S.MANUAL_REVIEW,
    'reconciliation',
    'transient',
    false,
    'the outcome is still unknown after reconciliation; never re-send blindly',
  ),
  unexplained: op(S.FAILED, 'dispatch', 'internal', false, 'Verity cannot explain this state from its records'),
} satisfies Record<string, FailureCodeInfo>;

export type FailureCode = keyof typeof FAILURE_CODES;

function failure<P extends string>(code: FailureCode, phase: P, at: string, detail?: string): Failure<P> {
  const info = FAILURE_CODES[code];
  return {
    code,
    phase,
    category: info.category,
    retryable: info.retryable,
    message: detail ? `${info.message}: ${detail}` : info.message,
    at,
  };
}

/**
 * A failed (invalid), expired or cancelled execution; `phase` is the status it was in. `operations`: the execution's
 * as they stand when it ends (nothing is sent for it after that). `retryable` says the same request, submitted again
 * unchanged, may succeed: not once one of them was sent — submitted again, it would be sent again (an SMS twice, a
 * second call), which is exactly the blind re-send the record exists to prevent. Then the message says why.
 */
export function executionFailure(
  code: 'invalid_request' | 'deadline_exceeded' | 'cancelled_by_caller',
  phase: ExecutionStatus,
  at: Date,
  detail?: string,
  operations: readonly { attempt: number }[] = [],
): ExecutionFailure {
  const effective = code === 'deadline_exceeded' && phase === E.WAITING_FOR_APPROVAL ? 'approval_timed_out' : code;
  const ended = failure(effective, phase, at.toISOString(), detail);
  const sent = operations.filter(everSent).length;
  if (!ended.retryable || sent === 0) return ended;
  return {
    ...ended,
    retryable: false,
    message:
      `${ended.message}; ${sent === 1 ? 'one of its operations was' : `${sent} of its operations were`} sent: ` +
      'submitted again unchanged, it would send them again',
  };
}

/**
 * The cause a send records when the connector refused to make the call because the tenant's egress policy does not
 * allow the target (a host off its allowlist, a port it does not list, an address that must not be reached). The
 * operation is never sent and ends FAILED (`SOURCE_UNREACHABLE`, as the contract has it for a call that never left),
 * but nothing about it is transient: the same request fails the same way until a tenant admin changes the allowlist.
 */
export const EGRESS_REFUSED = 'egress_refused';

/**
 * The cause a send records when the call names a tenant secret (`{{secret:NAME}}`) that is not set: nothing left, and
 * nothing passes on its own either — a tenant admin has to set the secret (or the agent name another one).
 */
export const SECRET_NOT_SET = 'secret_not_set';

/**
 * The cause a send records when the call names a tenant secret that the allowlist entry of its host does not bind
 * (`allow_hosts[].secrets`): the secret is meant for other hosts, so nothing left — and nothing passes on its own: a
 * tenant admin has to bind it to that host (or the agent send it where it belongs).
 */
export const SECRET_NOT_BOUND = 'secret_not_bound';

/** The causes of a send the connector refused to make: a policy failure each, never a transient one. */
export type SendRefusedCause = typeof EGRESS_REFUSED | typeof SECRET_NOT_SET | typeof SECRET_NOT_BOUND;

/** The cause of a cap refusal of an amount that is above the cap's max_amount by itself (spendingCapRefusalCause). */
export const AMOUNT_ABOVE_CAP = 'amount_above_cap';

/**
 * The cause a cap refusal records. Beyond the cap (`max_operations`, `max_amount`): `spending_cap_exceeded`, which passes
 * once the window does — unless the amount (`requested`) is above the cap's `max_amount` on its own: then no window,
 * however empty, has room for it (`amount_above_cap`), and calling it retryable would have an agent retry it for ever.
 * An amount the cap cannot count (`amount_unreadable`: not a positive finite number; `currency_mismatch`: another
 * currency than the cap's): `spending_cap_unmeasurable`, which no wait changes either — the same operation is refused
 * the same way (and a new submission of it is a 400 at intake).
 */
export function spendingCapRefusalCause(refusal: {
  rule: string;
  requested?: number | null;
  maxAmount?: number;
}): typeof AMOUNT_ABOVE_CAP | 'spending_cap_exceeded' | 'spending_cap_unmeasurable' {
  const { rule, requested, maxAmount } = refusal;
  if (rule === 'max_amount' && typeof requested === 'number' && maxAmount !== undefined && requested > maxAmount) {
    return AMOUNT_ABOVE_CAP;
  }
  return rule === 'max_operations' || rule === 'max_amount' ? 'spending_cap_exceeded' : 'spending_cap_unmeasurable';
}

/**
 * The cause a dispatch records when it cancels a never-sent operation whose `resend_ref` (the caller's name for the
 * effect at a provider that does not deduplicate: the SMS `client_ref`) names another of the tenant's operations that
 * was sent and is not settled (`blocksResend`): sending it could make the effect twice, the blind re-send intake refuses
 * (`409 reference-unsettled`). Checked again at the send because intake may have let it in before the other one went
 * out. Retryable: once the other one settles, a retry is judged afresh.
 */
export const REFERENCE_UNSETTLED = 'reference_unsettled';

/**
 * The cause a dispatch records when it cancels a never-sent retry whose retried operation (or one before it in the chain
 * of retries) was FAILED when the retry was made and contradicted since (`failureRefuted`: a late 2xx, or a read of its
 * source that showed the effect): the premise of the retry, "no effect exists", no longer stands, and sending it could
 * make the effect twice — the retry intake would now refuse (`409 effect-exists`). Not retryable: nothing will undo the
 * contradiction.
 */
export const RETRY_REFUTED = 'retry_refuted';

/**
 * The event data of the cancel of such a retry (`RETRY_REFUTED`), whoever writes it — the lifecycle, which asks the
 * chain before anything else of a PREPARED retry (`preparedStep`), or the send guard's refusal at send: the cause, why
 * in words, and the operation it retries.
 */
export function refutedRetryCancel(retryOf: string | null): { cause: string; detail: string; retry_of: string | null } {
  return {
    cause: RETRY_REFUTED,
    detail:
      `the FAILED this operation retries (${retryOf}), or one that operation retried in turn, was contradicted ` +
      'since the retry was made (the provider took it, or its source showed the effect): sending it could make the ' +
      'effect twice, so it was not sent',
    retry_of: retryOf,
  };
}

/**
 * Whether the operation is a retry the dispatch cancelled as `retry_refuted`: the FAILED it was made on the word of was
 * refuted, for good (`operationRetryRule`'s `retryRefuted`: a retry of it is made on the same word). `change`: the move
 * that brought it to its status.
 */
export function cancelledAsRefutedRetry(status: OperationStatus, change: LastStatusChange | null): boolean {
  return status === S.CANCELLED && change?.cause === RETRY_REFUTED;
}

/** The move that brought the operation to its status: the event's from-status, data and time. */
export interface LastStatusChange {
  from: OperationStatus | null;
  /** `cause` from the event data (dependency_not_done, approval_denied, execution_cancelled, egress_refused, secret_not_set, secret_not_bound...). */
  cause?: string | null;
  /** `refusal` from the event data: the rule that refused a send, in words (it names the host, the port or the secret's name — never a secret's value). */
  refusal?: string | null;
  actor?: string | null;
  at: Date;
}

export interface OperationForFailure {
  status: OperationStatus;
  terminalReason: TerminalReason | null;
  /** A FAILED whose "no effect" was refuted since (`failureRefuted`): never retryable, whatever its code says. */
  failureRefuted?: boolean;
}

const CANCEL_CAUSES: Readonly<Record<string, FailureCode>> = {
  approval_denied: 'approval_denied',
  dependency_not_done: 'dependency_not_done',
  spending_cap_exceeded: 'spending_cap_reached',
  [AMOUNT_ABOVE_CAP]: 'amount_above_cap',
  spending_cap_unmeasurable: 'spending_cap_unmeasurable',
  [REFERENCE_UNSETTLED]: 'reference_unsettled',
  [RETRY_REFUTED]: 'retry_refuted',
  execution_cancelled: 'execution_cancelled',
  execution_expired: 'execution_expired',
  execution_invalid: 'execution_invalid',
};

const HOLD_BEFORE_SEND: Readonly<Partial<Record<TerminalReason, FailureCode>>> = {
  [TerminalReason.KNOWLEDGE_CONFLICT]: 'knowledge_conflict',
  [TerminalReason.SOURCE_UNREACHABLE]: 'precondition_unreadable',
  [TerminalReason.FIELD_MISSING]: 'precondition_unreadable',
};

function failureCodeOf(op: OperationForFailure, change: LastStatusChange): FailureCode {
  const reason = op.terminalReason;
  // Out of MANUAL_REVIEW a person decides — except the system's own moves (a re-check's VERIFIED, the cancel of a
  // never-sent hold whose execution ended), which say so in their actor. Rows from before actors were recorded have none.
  const byHuman = change.actor === 'human' || (change.from === S.MANUAL_REVIEW && change.actor !== 'system');
  if (op.status === S.FAILED) {
    if (byHuman) return 'resolved_failed';
    if (reason === TerminalReason.CONNECTOR_REJECTED) return 'connector_rejected';
    if (reason === TerminalReason.SOURCE_UNREACHABLE) {
      if (change.cause === EGRESS_REFUSED) return 'egress_refused';
      if (change.cause === SECRET_NOT_SET) return 'secret_not_set';
      if (change.cause === SECRET_NOT_BOUND) return 'secret_not_bound';
      return 'never_delivered';
    }
    // Rows written before PROVEN_ABSENT existed settled RECONCILING -> FAILED with no reason: the same proof.
    if (reason === TerminalReason.PROVEN_ABSENT || change.from === S.RECONCILING) return 'proven_absent';
    return 'unexplained';
  }
  if (op.status === S.CANCELLED) {
    // A deny is a person's decision too: its own reason (or recorded cause) names it before the actor does.
    if (reason === TerminalReason.DENIED || change.cause === 'approval_denied') return 'approval_denied';
    // A reviewer's release that a spending cap refused is cancelled by the platform's rule, not by the reviewer (who
    // asked for the send): the recorded cause names it, as it does for a deny.
    if (change.cause === 'spending_cap_exceeded') return 'spending_cap_reached';
    if (change.cause === AMOUNT_ABOVE_CAP) return 'amount_above_cap';
    if (change.cause === 'spending_cap_unmeasurable') return 'spending_cap_unmeasurable';
    if (byHuman) return 'resolved_cancelled';
    return CANCEL_CAUSES[change.cause ?? ''] ?? 'unexplained';
  }
  // MANUAL_REVIEW: a hold before sending, after an acknowledged send (verification), or after an unknown outcome.
  if (change.from === S.PREPARED) return (reason && HOLD_BEFORE_SEND[reason]) || 'unexplained';
  if (reason === TerminalReason.INTEGRITY_MISMATCH) return 'integrity_mismatch';
  if (change.from === S.ACKNOWLEDGED) return 'verification_inconclusive';
  return 'outcome_unknown';
}

function holdPhase(from: OperationStatus | null): OperationFailurePhase {
  if (from === S.PREPARED) return 'precondition';
  return from === S.ACKNOWLEDGED ? 'verification' : 'reconciliation';
}

/**
 * The failure of one operation, or null when it did not end differently from what was asked (VERIFIED, still in
 * flight, or ACKNOWLEDGED with nothing to read back). MANUAL_REVIEW counts: the system could not finish it.
 */
export function operationFailure(op: OperationForFailure, change: LastStatusChange | null): OperationFailure | null {
  if (op.status !== S.FAILED && op.status !== S.CANCELLED && op.status !== S.MANUAL_REVIEW) return null;
  // Every move writes an event (I2), so a missing one is a row Verity cannot explain.
  const known = change ?? { from: null, at: new Date(0) };
  const code = failureCodeOf(op, known);
  const phase =
    op.status === S.MANUAL_REVIEW ? holdPhase(known.from) : (FAILURE_CODES[code].phase as OperationFailurePhase);
  const reason = op.terminalReason ? `terminal_reason ${op.terminalReason}` : undefined;
  // A refused send says which rule refused it (the host, the port, the address, the secret's name), so an admin knows
  // what to change.
  const refusedByRule = code === 'egress_refused' || code === 'secret_not_set' || code === 'secret_not_bound';
  const detail = refusedByRule && known.refusal ? `${known.refusal} (${reason})` : reason;
  const found = failure(code, phase, known.at.toISOString(), detail);
  if (!(op.failureRefuted && op.status === S.FAILED)) return found;
  // `proven_absent` says retryable: the same request may succeed. Not once the provider acknowledged it late or its
  // source showed the effect: re-sending could make it twice (the retry itself is refused, 409 effect-exists).
  return {
    ...found,
    retryable: false,
    message: `${found.message}; contradicted since (the provider acknowledged it late, or its source showed the effect): it may have happened`,
  };
}
