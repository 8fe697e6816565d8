/**
 * What a read-back of a sent operation decides, as a pure function of what is known at that moment: the reconciler
 * (verification of ACKNOWLEDGED, reconciliation of UNKNOWN) only carries the decision out. "Did not happen" is
 * concluded only from an absent read of the provider's own lookup (not one the operation declared), once absence is
 * proof, of a send the provider never acknowledged; everything inconclusive is read again with
 * backoff, then held for a human; nothing here ever sends.
 */
import {
  HOLDS_WITH_A_RECORD_ON_FILE,
  OPERATION_TRANSITIONS,
  OperationStatus,
  TerminalReason,
  VerificationMethod,
  VerificationMethodValue,
} from './operation';

/** What the connector's read found, by kind (the connector's ReadBackResult). */
export type ReadBackKind = 'found' | 'mismatch' | 'absent' | 'stale' | 'field_missing' | 'unreachable';
export type InconclusiveReadKind = Extract<ReadBackKind, 'stale' | 'field_missing' | 'unreachable'>;

/**
 * Reads that found a record of the effect: as sent, with other values, or without the field that would tell its state.
 * Whatever else they leave open, the effect exists at the source, so nothing may record that it did not happen (I14):
 * a human FAILED is refused while a read shows one of these.
 */
export const READS_SHOWING_THE_EFFECT: readonly ReadBackKind[] = ['found', 'mismatch', 'field_missing'];

export function readShowsTheEffect(read: ReadBackKind): boolean {
  return READS_SHOWING_THE_EFFECT.includes(read);
}

/**
 * I5 with I14: whether a retry of an operation is refused by what its source showed after it ended. FAILED says "no
 * effect exists — a retry is safe"; a re-check whose read raced a reviewer's FAILED (an `operation.rechecked` event
 * with `after: "FAILED"`) and showed a record of the effect refutes that, and a retry could make the effect twice. The
 * FAILED stays (it is final, and the history shows both); the retry is refused. `later`: the results of those reads.
 */
export function retryRefusedByLaterRead(later: readonly ReadBackKind[]): boolean {
  return later.some(readShowsTheEffect);
}

/**
 * I5 with I14: whether a retry of an operation is refused because the provider acknowledged its send after it ended
 * FAILED (a 2xx that came back late, recorded as `acknowledged_at`: LATE_ACKNOWLEDGEMENT_STATUSES). No statement writes
 * FAILED over an acknowledgement on file, so a FAILED operation with one was refuted afterwards: the provider took the
 * send, and a retry could make the effect twice.
 */
export function retryRefusedByAcknowledgement(op: { status: OperationStatus; acknowledged: boolean }): boolean {
  return op.status === OperationStatus.FAILED && op.acknowledged;
}

/**
 * Whether a FAILED operation's "no effect exists" was refuted after it was recorded: the provider's 2xx came back late
 * (`acknowledged`), or a read of its source after the resolution showed the effect (`effectShownAfter`). The status
 * stays FAILED (it is final, and the history shows both), but nothing may present it as "no effect, a retry is safe":
 * its commit is `unknown` and its retry `forbidden` (the retry itself is refused with `409 effect-exists`).
 */
export function failureRefuted(op: {
  status: OperationStatus;
  acknowledged: boolean;
  effectShownAfter: boolean;
}): boolean {
  return op.status === OperationStatus.FAILED && (op.acknowledged || op.effectShownAfter);
}

/**
 * Why a human FAILED of a held, sent operation is refused by the read made when it is decided (I14), or null. FAILED
 * says "no effect exists — a retry is safe"; where the source can be read back, that stands only on a read in which the
 * source answers and shows no effect (`absent`). (The status model refuses it before any read where a record of the
 * effect is on file: the provider acknowledged the send, or the hold's own read found the record —
 * HOLDS_WITH_A_RECORD_ON_FILE.)
 * - `effect_shown` — the read shows a record of the effect now;
 * - `source_unread` — the source cannot be read now (unreachable, lagging): the reviewer tries again once it answers,
 *   or resolves otherwise. A read that was not made at all (`made` false) is not a source that may answer later.
 */
export function failedRefusedByRead(
  read: ReadBackKind,
  /**
   * False when the read was not even attempted (the tenant's settings refuse it, or it cannot be built): waiting for
   * the source changes nothing, so — as where nothing can be read back — a person's evidence is all there is.
   */
  made = true,
): 'effect_shown' | 'source_unread' | null {
  if (readShowsTheEffect(read)) return 'effect_shown';
  if (read === 'absent') return null;
  return made ? 'source_unread' : null;
}

/**
 * Why a human VERIFIED of a held, sent operation is refused by the read made when it is decided, or null. VERIFIED says
 * "the effect happened", and an absent read weighs against it exactly where reconciliation itself would conclude from
 * it that the effect did not happen: the source is the provider's own lookup by the values sent (`sourceProvesAbsence`)
 * and no record of the effect is on file (`absenceWouldRefute`: an acknowledgement, or a record the hold's own read
 * found, that the lookup contradicts leaves that lookup as inconclusive as a lagging one). Then:
 * - `refuted` — absence is evident (`absenceEvident`: no call of it can still land and show): it did not happen;
 * - `not_yet` — a call may still land, or the provider not show it yet: the reviewer asks again once absence would be
 *   evident, when the read either shows the effect or refutes it.
 * Every other read — the effect found, a source that cannot be read now or whose absence proves nothing — leaves the
 * reviewer's evidence standing, with the read recorded beside it.
 */
export function verifiedRefusedByRead(
  read: ReadBackKind,
  source: AbsenceAtTheSource,
  absenceEvident: boolean,
): 'refuted' | 'not_yet' | null {
  if (read !== 'absent' || !absenceWouldRefute(source)) return null;
  return absenceEvident ? 'refuted' : 'not_yet';
}

/**
 * What an absent read of a sent operation would weigh: whose lookup it is, whether the provider acknowledged the send,
 * and why it is held (a hold whose own read found the record has it on file).
 */
export interface AbsenceAtTheSource {
  sourceProvesAbsence: boolean;
  acknowledged: boolean;
  heldFor: TerminalReason | null;
}

/**
 * Whether an absent read would contradict a VERIFIED (so a reviewer's VERIFIED is read against the source first): only
 * the provider's own lookup, of an effect of which no record is on file — neither the provider's acknowledgement nor a
 * record the hold's own read found. Against such a record a later "not there" is as inconclusive as a lagging read.
 */
export function absenceWouldRefute(source: AbsenceAtTheSource): boolean {
  return (
    source.sourceProvesAbsence &&
    !source.acknowledged &&
    !(source.heldFor !== null && HOLDS_WITH_A_RECORD_ON_FILE.includes(source.heldFor))
  );
}

/**
 * Whether the statement that writes this move must also find the operation unacknowledged: neither a proof of absence
 * (FAILED, PROVEN_ABSENT) nor a person's FAILED stands for an effect the provider acknowledged, even when the
 * acknowledgement was recorded late (a sender whose 2xx came after the sweeper marked the operation UNKNOWN) — after the
 * read, or the decision, that judged it.
 */
export function requiresUnacknowledged(
  to: OperationStatus,
  reason: TerminalReason | null,
  actor: 'human' | 'system' = 'system',
): boolean {
  return to === OperationStatus.FAILED && (reason === TerminalReason.PROVEN_ABSENT || actor === 'human');
}

/**
 * Whether the statement that writes a person's move must also find no rejection of the send on file (`rejected_at IS
 * NULL`): a person's VERIFIED (`refusedWhenRejected`) never stands against the provider's own "rejected", even when that
 * answer was recorded late (a sender whose 4xx came after the sweeper marked the operation UNKNOWN) — after the read
 * that judged the decision, and before its write.
 */
export function requiresUnrejected(to: OperationStatus, actor: 'human' | 'system'): boolean {
  return actor === 'human' && OPERATION_TRANSITIONS.some((r) => r.to === to && r.refusedWhenRejected);
}

/**
 * Whether a VERIFIED operation is contradicted by the provider's rejection of its send, recorded after it was verified
 * (a 4xx that came back late: `rejected_at`, LATE_REJECTION_TRIES). The status stays VERIFIED (it is final, and the
 * history shows both), but the record may not claim that this request committed its effect against the provider's
 * own answer: its commit is `unknown`, and the execution's effects count it as uncertain. Whoever verified it — a
 * person, or a read of the source (which may have found an effect another writer made, or a provider that answered
 * two ways): the provider's word is about this very request.
 */
export function verificationContradicted(op: { status: OperationStatus; rejected: boolean }): boolean {
  return op.status === OperationStatus.VERIFIED && op.rejected;
}

/** The hold an inconclusive read ends in once the read budget is spent. */
export const INCONCLUSIVE_READ_REASON: Record<InconclusiveReadKind, TerminalReason> = {
  stale: TerminalReason.STALE_REPLICA,
  field_missing: TerminalReason.FIELD_MISSING,
  unreachable: TerminalReason.SOURCE_UNREACHABLE,
};

export interface ReadBackSituation {
  /** ACKNOWLEDGED (verification) or RECONCILING (reconciliation of an UNKNOWN). */
  status: OperationStatus.ACKNOWLEDGED | OperationStatus.RECONCILING;
  read: ReadBackKind;
  /**
   * Whether an absent read is proof now. Verification: the settle window since the acknowledgement has passed.
   * Reconciliation: every call that could have been made has landed and the replica shows it. (Only asked of an
   * absent read.)
   */
  absenceIsProof: boolean;
  /**
   * The provider acknowledged the send (a 2xx: `acknowledged_at` is set). Its own answer says the effect was accepted,
   * so a source that does not show it is behind (or lost it) — never proof that nothing happened: an absent read is
   * then read again like a stale one, and held for a human (STALE_REPLICA) once the budget is spent, never FAILED.
   */
  acknowledged: boolean;
  /** Checks made before this read, and how many inconclusive reads are allowed before a hold. */
  checksBefore: number;
  budget: number;
  /**
   * Whether the connector's read is the provider's own lookup of the effect, so that "not there" is the provider's word
   * (the connector's `readBackProvesAbsence`). A read-back the operation's author declared (the `http` connector's
   * `read_back`: any URL, any field) proves nothing by coming back empty — a wrong path answers 404 for an effect that
   * exists — so its absence is as inconclusive as a stale read: read again, then held, never FAILED. (Only asked of an
   * absent read in reconciliation.)
   */
  sourceProvesAbsence: boolean;
  /**
   * An earlier read of this send's source showed a record of the effect (`readShowsTheEffect`: a record without the
   * field that tells its state, read again as inconclusive). A source that then answers "not there" has lost the record
   * or flaps between replicas; the effect was seen, so its absence now is as inconclusive as a stale read: read again,
   * then held, never FAILED. (Only asked of an absent read in reconciliation.)
   */
  effectShownBefore?: boolean;
}

export type ReadBackDecision =
  /** The source shows the effect as sent: VERIFIED. */
  | { kind: 'verified' }
  /** Reconciliation proved the effect absent: FAILED (PROVEN_ABSENT). */
  | { kind: 'failed'; reason: TerminalReason.PROVEN_ABSENT }
  /** A human decides: MANUAL_REVIEW with this reason. */
  | { kind: 'hold'; reason: TerminalReason }
  /** Verification: acknowledged but not at the source after the settle window: UNKNOWN, handed to reconciliation. */
  | { kind: 'unknown' }
  /** Reconciliation not concluded: back to UNKNOWN, read again later. */
  | { kind: 'unknown-again' }
  /** Verification not concluded: stays ACKNOWLEDGED, read again later. */
  | { kind: 'read-again' };

export function decideReadBack(situation: ReadBackSituation): ReadBackDecision {
  const reconciling = situation.status === OperationStatus.RECONCILING;
  const later: ReadBackDecision = reconciling ? { kind: 'unknown-again' } : { kind: 'read-again' };
  switch (situation.read) {
    case 'found':
      return { kind: 'verified' };
    case 'mismatch':
      return { kind: 'hold', reason: TerminalReason.INTEGRITY_MISMATCH };
    case 'absent':
      // Never "did not happen" before absence is proof: the provider may simply not show it yet.
      if (!situation.absenceIsProof) return later;
      if (!reconciling) return { kind: 'unknown' };
      // The provider's acknowledgement, or an earlier read that showed the record, contradicts the empty source; or the
      // source is only what the operation declared: as inconclusive as a stale read, never FAILED.
      if (situation.acknowledged || situation.effectShownBefore || !situation.sourceProvesAbsence) {
        return inconclusive(situation, 'stale', later);
      }
      return { kind: 'failed', reason: TerminalReason.PROVEN_ABSENT };
    default:
      return inconclusive(situation, situation.read, later);
  }
}

/** An inconclusive read: read again while the budget lasts, then a human decides (the read's hold reason). */
function inconclusive(
  situation: ReadBackSituation,
  read: InconclusiveReadKind,
  later: ReadBackDecision,
): ReadBackDecision {
  if (situation.checksBefore + 1 >= situation.budget) {
    return { kind: 'hold', reason: INCONCLUSIVE_READ_REASON[read] };
  }
  return later;
}

export type ReconcileStart =
  | { kind: 'read' }
  | { kind: 'hold'; reason: TerminalReason.CONNECTOR_ERROR; why: 'no read-back' | 'not verified' | 'deadline' };

/**
 * Before an UNKNOWN is read: an effect nothing can read back is a human's to settle (re-sending could deliver it a
 * second time), and so is one whose agent asked for no verification (`verification_method` empty: VERIFIED is then
 * a human's to write, so a read that found the effect could settle nothing), and one past the reconciliation deadline;
 * otherwise it is read (UNKNOWN → RECONCILING).
 */
export function decideReconcileStart(situation: {
  canReadBack: boolean;
  verificationMethod: VerificationMethodValue;
  deadlinePassed: boolean;
}): ReconcileStart {
  if (!situation.canReadBack) return { kind: 'hold', reason: TerminalReason.CONNECTOR_ERROR, why: 'no read-back' };
  if (situation.verificationMethod !== VerificationMethod.READ_AFTER_WRITE) {
    return { kind: 'hold', reason: TerminalReason.CONNECTOR_ERROR, why: 'not verified' };
  }
  if (situation.deadlinePassed) return { kind: 'hold', reason: TerminalReason.CONNECTOR_ERROR, why: 'deadline' };
  return { kind: 'read' };
}

/** The timings that bound when a call of a sent operation can still reach the provider (the config of that name). */
export interface CallTimings {
  sendGraceMs: number;
  connectorTimeoutMs: number;
  settleWindowMs: number;
}

/**
 * From when "no effect exists" can be concluded about a sent operation: by the reconciler from an absent read, and by
 * a reviewer from what the provider shows (I14). A call starts no later than SEND_GRACE_MS after SENT, or — by a
 * worker that still held the job's lock — before the operation was marked UNKNOWN (the sender writes UNKNOWN after its
 * call; the sweeper only once no worker holds the lock); it lasts at most CONNECTOR_TIMEOUT_MS; a committed write may
 * take SETTLE_WINDOW_MS more to show at the source. An acknowledged call ended when it was acknowledged (possibly later
 * than the grace, by a worker that held its lock). Before then, an empty source is no evidence of absence.
 */
export function absenceEvidentAt(
  op: { sentAt: Date; lastUnknownAt: Date | null; acknowledgedAt?: Date | null },
  timings: CallTimings,
): Date {
  const latestCallStart = Math.max(
    op.sentAt.getTime() + timings.sendGraceMs,
    op.lastUnknownAt ? op.lastUnknownAt.getTime() : 0,
  );
  const latestLanding = Math.max(
    latestCallStart + timings.connectorTimeoutMs,
    op.acknowledgedAt ? op.acknowledgedAt.getTime() : 0,
  );
  return new Date(latestLanding + timings.settleWindowMs);
}
