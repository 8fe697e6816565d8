import { IllegalTransitionError, StatusModelErrorCode } from './errors';
import { absenceWouldRefute } from './read-back';
import { ExecutionStatus, canMoveExecution, isTerminalExecution } from './execution';
import { DependenciesState, RELEASABLE_EXECUTION_STATUSES } from './dispatch';
import {
  Actor,
  OperationStatus,
  OperationTransitionRule,
  TerminalReason,
  VerificationMethod,
  VerificationMethodValue,
  operationTransitionRule,
} from './operation';

export interface OperationTransitionContext {
  actor?: Actor;
  terminalReason?: TerminalReason | null;
  verificationMethod: VerificationMethodValue;
  /** True once the operation has ever been SENT (its `attempt` is above zero). */
  everSent: boolean;
  /** PREPARED -> VERIFIED is a read of the source, recorded as no change required. */
  noChangeRequired?: boolean;
  /** Why the operation is held now (its terminal_reason while in MANUAL_REVIEW), for rules that depend on it. */
  heldFor?: TerminalReason | null;
  /** The provider acknowledged the send (its `acknowledged_at` is set), for rules that depend on it. */
  acknowledged?: boolean;
  /** A read of the source made while the operation was held showed the effect (`recovery_obligation.effect_shown`). */
  effectShown?: boolean;
  /** The provider's rejection of the send is on file (its `rejected_at` is set: a 4xx that came back late). */
  rejected?: boolean;
  /**
   * The operation's execution has ended unreleasable (cancelled, expired, failed): nothing of it can be sent any more.
   * The statement that makes the move checks the same in the database.
   */
  executionEnded?: boolean;
}

/**
 * I1: the single gate for every operation status change. Returns the rule that allowed it, or throws.
 * The verification rule lives here: without read-after-write, VERIFIED is reachable only by a human resolution
 * (MANUAL_REVIEW -> VERIFIED).
 */
export function assertOperationTransition(
  from: OperationStatus,
  to: OperationStatus,
  context: OperationTransitionContext,
): OperationTransitionRule {
  const fail = (code: StatusModelErrorCode, detail: string): never => {
    throw new IllegalTransitionError(code, 'operation', from, to, detail);
  };
  const found = operationTransitionRule(from, to);
  if (!found) return fail(StatusModelErrorCode.ILLEGAL_TRANSITION, 'not in the transition table');
  const actor = context.actor ?? 'system';
  // A system re-check may release a hold it could not conclude (the source was unreachable or lagging), never one
  // that needs a judgement; its VERIFIED still needs read-after-write evidence (checked below).
  const systemRecheck =
    actor !== 'human' && Boolean(context.heldFor) && found.systemWhenHeldFor.includes(context.heldFor!);
  // Nor may it decide a hold, except one whose only outcome is left: a never-sent operation of an ended execution.
  const systemOnEnd = actor !== 'human' && context.executionEnded === true && found.systemWhenExecutionEnded;
  if (found.humanOnly && actor !== 'human' && !systemRecheck && !systemOnEnd) {
    fail(StatusModelErrorCode.HUMAN_ONLY, 'only a human resolution may take this move');
  }
  if (found.neverSentOnly && context.everSent) {
    fail(StatusModelErrorCode.ALREADY_SENT, 'the operation was already handed to a connector');
  }
  if (found.sentOnly && !context.everSent) {
    fail(StatusModelErrorCode.NEVER_SENT, 'the operation was never sent: there is no outcome to judge');
  }
  if (context.heldFor && found.refusedWhenHeldFor.includes(context.heldFor)) {
    fail(
      StatusModelErrorCode.EFFECT_EXISTS,
      `the operation is held for ${context.heldFor}: the source showed the effect`,
    );
  }
  if (context.acknowledged && found.refusedWhenAcknowledged) {
    fail(StatusModelErrorCode.EFFECT_EXISTS, 'the provider acknowledged the effect');
  }
  if (context.effectShown && found.refusedWhenEffectShown) {
    fail(StatusModelErrorCode.EFFECT_EXISTS, 'a read of the source made while it was held showed the effect');
  }
  // A person's word only: a read of the source that finds the effect is recorded as it is, beside the rejection.
  if (context.rejected && found.refusedWhenRejected && actor === 'human') {
    fail(StatusModelErrorCode.PROVIDER_REJECTED, 'the provider rejected the send');
  }
  const reason = context.terminalReason ?? null;
  if (reason === null && found.reasonRequired) {
    fail(StatusModelErrorCode.REASON_REQUIRED, `one of ${found.reasons.join(', ')} is required`);
  }
  if (reason !== null && !found.reasons.includes(reason)) {
    fail(StatusModelErrorCode.REASON_NOT_ALLOWED, `${reason} does not explain this move`);
  }
  // I6: only a human resolution (MANUAL_REVIEW -> VERIFIED, a human-only rule) is exempt from read-after-write.
  // Claiming actor 'human' on any other move into VERIFIED does not bypass the verification rule.
  if (to === OperationStatus.VERIFIED && (!found.humanOnly || systemRecheck)) {
    if (context.verificationMethod !== VerificationMethod.READ_AFTER_WRITE) {
      fail(StatusModelErrorCode.VERIFICATION_UNAVAILABLE, 'VERIFIED needs read_after_write evidence or a human');
    }
    if (from === OperationStatus.PREPARED && !context.noChangeRequired) {
      fail(StatusModelErrorCode.ILLEGAL_TRANSITION, 'PREPARED -> VERIFIED only when no change is required');
    }
  }
  return found;
}

export function isOperationTransitionAllowed(
  from: OperationStatus,
  to: OperationStatus,
  context: OperationTransitionContext,
): boolean {
  try {
    assertOperationTransition(from, to, context);
    return true;
  } catch (error) {
    if (error instanceof IllegalTransitionError) return false;
    throw error;
  }
}

export function assertExecutionTransition(from: ExecutionStatus, to: ExecutionStatus): void {
  if (!canMoveExecution(from, to)) {
    throw new IllegalTransitionError(
      StatusModelErrorCode.ILLEGAL_TRANSITION,
      'execution',
      from,
      to,
      'not in the transition table',
    );
  }
}

export type ResolutionStatus =
  OperationStatus.VERIFIED | OperationStatus.FAILED | OperationStatus.SENT | OperationStatus.CANCELLED;

/** Every resolution a reviewer can record for a held operation (which ones are permitted depends on the operation). */
export const RESOLUTION_STATUSES: readonly ResolutionStatus[] = [
  OperationStatus.VERIFIED,
  OperationStatus.FAILED,
  OperationStatus.SENT,
  OperationStatus.CANCELLED,
];

/**
 * How many "still unknown after investigation" records one hold keeps. Each re-dates the obligation and is kept on it
 * (and in the history); past this many the hold is a reviewer's to resolve or escalate, not to re-date again — the
 * row, read with every page that shows the operation, would otherwise grow without bound.
 */
export const MAX_INVESTIGATIONS_PER_HOLD = 100;

/**
 * How much evidence, in bytes of UTF-8 as it is stored, the "still unknown" records of one hold keep together (64 KiB):
 * an investigation that would take it past this is refused, as one past MAX_INVESTIGATIONS_PER_HOLD is. Each
 * statement may be 10,000 characters (up to 30 KB), so 100 of them made one operation ~3 MB and an execution of 100
 * held operations ~300 MB in one answer. 64 KiB keeps the whole history of a hold readable in one page (a hundred
 * notes of ~650 bytes, or six of the longest in plain text) and one execution's held operations under ~13 MB of it.
 */
export const MAX_INVESTIGATION_BYTES_PER_HOLD = 64 * 1024;

/** The permitted actions of a recovery obligation: never sent → SENT or CANCELLED; sent → VERIFIED or FAILED. */
export function permittedResolutions(
  status: OperationStatus,
  everSent: boolean,
  heldFor: TerminalReason | null = null,
  acknowledged = false,
  effectShown = false,
  rejected = false,
): ResolutionStatus[] {
  if (status !== OperationStatus.MANUAL_REVIEW) return [];
  return RESOLUTION_STATUSES.filter((to) => {
    return isOperationTransitionAllowed(status, to, {
      actor: 'human',
      verificationMethod: '',
      everSent,
      heldFor,
      acknowledged,
      effectShown,
      rejected,
    });
  });
}

/** One action a reviewer may or may not take on a held operation, and why, in words the console shows as they are. */
export interface ResolutionOption {
  status: ResolutionStatus;
  permitted: boolean;
  why: string;
  /**
   * What Verity checks at the moment the action is taken: `read_back` = the source is read first (FAILED; VERIFIED where
   * the provider's own lookup can answer that the effect does not exist).
   */
  check: 'read_back' | null;
  /**
   * When a refused action becomes permitted with nothing else changing (a FAILED that waits until no call of the
   * operation can still land), as an ISO time; null otherwise. A page showing the options reloads then.
   */
  available_at: string | null;
}

const PERMITTED_WHY: Record<ResolutionStatus, string> = {
  VERIFIED: 'the effect happened, shown by the evidence you give',
  FAILED: 'no effect exists, shown by the evidence you give',
  SENT: 'it was never sent: release it to be sent now, once',
  CANCELLED: 'it was never sent: cancel it, nothing will be sent',
};

/** A release that also grants the approval the operation needs (ReleaseNeeds.grantsApproval). */
const RELEASE_GRANTING_APPROVAL_WHY =
  'it was never sent: release it to be sent now, once; it needs approval, and releasing it grants that approval too';

const REFUSED_WHY: Partial<Record<StatusModelErrorCode, string>> = {
  [StatusModelErrorCode.ALREADY_SENT]:
    'it was already sent: it cannot be sent again or cancelled; judge what happened instead (VERIFIED or FAILED)',
  [StatusModelErrorCode.NEVER_SENT]: 'it was never sent: there is no outcome to judge; release it or cancel it',
  [StatusModelErrorCode.EFFECT_EXISTS]:
    'a record of this effect is on file (the provider acknowledged it, or a read of the source showed it): it cannot be marked as not having happened',
  [StatusModelErrorCode.PROVIDER_REJECTED]:
    'the provider rejected this send (its answer came back after the send was marked UNKNOWN): it cannot be marked as having happened',
};

/**
 * Every resolution of a held operation, permitted or not, with the reason: the API and the console show exactly
 * this, so an action a reviewer sees is one the API accepts. `canReadBack`: the source can be read back, so a FAILED
 * is accepted only if a read at that moment does not find the effect (otherwise 409 effect-exists), and — where the
 * read is the provider's own lookup — a VERIFIED only if that read does not answer that the effect does not exist.
 * `absenceEvidentAt` (see `absenceEvidentAt` in read-back.ts): until then a call of this sent operation may still reach
 * the provider, so FAILED waits whatever the reviewer or a read sees now (`now` is the moment of the decision).
 */
export function resolutionOptions(input: {
  status: OperationStatus;
  everSent: boolean;
  heldFor: TerminalReason | null;
  canReadBack: boolean;
  /** The provider acknowledged the send: a record of the effect is on file, and FAILED is refused. */
  acknowledged?: boolean;
  /** A read made while it was held showed the effect: a record of it is on file, and FAILED is refused. */
  effectShown?: boolean;
  /** The provider's rejection of the send is on file (`rejected_at`): VERIFIED is refused. */
  rejected?: boolean;
  /**
   * The read-back is the provider's own lookup (the connector's `readBackProvesAbsence`): where an absent read would
   * contradict a VERIFIED (`absenceWouldRefute`), it is read against the source too (`verifiedRefusedByRead`).
   */
  sourceProvesAbsence?: boolean;
  absenceEvidentAt?: Date | null;
  now?: Date;
  /**
   * What a release (SENT) of a never-sent operation also needs: its execution not ended by a cancel, its deadline or a
   * failure (RELEASABLE_EXECUTION_STATUSES), and every operation it depends on done (dependenciesState) — the statement that commits the
   * release's SENT checks both. Undefined: not judged here.
   */
  release?: ReleaseNeeds;
}): ResolutionOption[] {
  if (input.status !== OperationStatus.MANUAL_REVIEW) return [];
  const failedWaitsUntil = absenceNotYetEvident(input);
  return RESOLUTION_STATUSES.map((to) => {
    const refused = resolutionRefusedBy(input, to);
    if (refused) {
      return {
        status: to,
        permitted: false,
        why: REFUSED_WHY[refused.code] ?? refused.message,
        check: null,
        available_at: null,
      };
    }
    const releaseBlocked = to === OperationStatus.SENT ? releaseRefusal(input.release) : null;
    if (releaseBlocked) return { status: to, permitted: false, why: releaseBlocked, check: null, available_at: null };
    if (to === OperationStatus.FAILED && failedWaitsUntil) {
      return {
        status: to,
        permitted: false,
        why:
          `a call made for it may still reach the provider until ${failedWaitsUntil.toISOString()}: ` +
          'before then, finding nothing at the source is no evidence that it did not happen',
        check: null,
        available_at: failedWaitsUntil.toISOString(),
      };
    }
    if (
      to === OperationStatus.VERIFIED &&
      input.canReadBack &&
      absenceWouldRefute({
        sourceProvesAbsence: input.sourceProvesAbsence === true,
        acknowledged: input.acknowledged === true,
        heldFor: input.heldFor,
      })
    ) {
      return {
        status: to,
        permitted: true,
        why: 'the effect happened: Verity reads the source first and refuses if the provider answers that it does not exist',
        check: 'read_back',
        available_at: null,
      };
    }
    const readFirst = to === OperationStatus.FAILED && input.canReadBack;
    return {
      status: to,
      permitted: true,
      why: readFirst
        ? 'no effect exists: Verity reads the source first and refuses unless it answers without the effect'
        : to === OperationStatus.SENT && input.release?.grantsApproval
          ? RELEASE_GRANTING_APPROVAL_WHY
          : PERMITTED_WHY[to],
      check: readFirst ? 'read_back' : null,
      available_at: null,
    };
  });
}

/**
 * The resolutions a reviewer is offered: exactly those `resolutionOptions` permits at that moment. The API's
 * `permitted_resolutions`, the obligation's `permitted_actions` and the console's buttons all come from here, so none
 * offers what `resolve` would refuse (a FAILED before `absenceEvidentAt`, or with a record of the effect on file).
 */
export function offeredResolutions(options: readonly ResolutionOption[]): ResolutionStatus[] {
  return options.filter((o) => o.permitted).map((o) => o.status);
}

/**
 * The status model's refusal of a reviewer's resolution `to` of a held operation, or null when the move itself is
 * allowed (a release may still wait for its execution and dependencies, a FAILED for `absenceEvidentAt`). Its code
 * tells a FAILED refused because a record of the effect is on file (EFFECT_EXISTS: the provider acknowledged it, or
 * the hold's read found it) from one refused because nothing was ever sent (NEVER_SENT): only the first has an effect
 * to show; and a VERIFIED refused because the provider's rejection is on file (PROVIDER_REJECTED), which has the
 * rejection to show.
 */
export function resolutionRefusedBy(
  held: {
    status: OperationStatus;
    everSent: boolean;
    heldFor: TerminalReason | null;
    acknowledged?: boolean;
    effectShown?: boolean;
    rejected?: boolean;
  },
  to: ResolutionStatus,
): IllegalTransitionError | null {
  try {
    assertOperationTransition(held.status, to, {
      actor: 'human',
      verificationMethod: '',
      everSent: held.everSent,
      heldFor: held.heldFor,
      acknowledged: held.acknowledged,
      effectShown: held.effectShown,
      rejected: held.rejected,
    });
    return null;
  } catch (error) {
    if (error instanceof IllegalTransitionError) return error;
    throw error;
  }
}

/** What a release of a held, never-sent operation also needs, as it stands: see `resolutionOptions`. */
export interface ReleaseNeeds {
  executionStatus: ExecutionStatus;
  /**
   * The execution's deadline has passed. Until the sweeper expires it, a running execution past its deadline is ended
   * all the same: nothing more is sent for it (a completed one is not bound by its deadline any more).
   */
  deadlinePassed: boolean;
  dependencies: DependenciesState;
  /**
   * The release grants the operation's approval with it (releaseGrantsApproval: the agent or the tenant's policy asks
   * for one, or one is on record): the option says so, so that a reviewer does not approve without knowing it.
   */
  grantsApproval?: boolean;
  /**
   * It is a retry, and the FAILED it retries (or one up its chain of retries) was contradicted since (a late 2xx, or a
   * read of its source that showed the effect): the send guard withdraws any release of it (`retry_refuted`).
   */
  retryRefuted?: boolean;
}

function releaseRefusal(release: ReleaseNeeds | undefined) {
  if (!release) return null;
  if (release.retryRefuted) {
    return 'it retries a FAILED that was contradicted since (the provider took it, or its source showed the effect): it will never be sent; cancel it instead';
  }
  if (!RELEASABLE_EXECUTION_STATUSES.includes(release.executionStatus)) {
    return `its execution is ${release.executionStatus}: nothing more is sent for it; cancel it instead`;
  }
  if (release.deadlinePassed && !isTerminalExecution(release.executionStatus)) {
    return 'its execution’s deadline has passed: nothing more is sent for it; cancel it instead';
  }
  if (release.dependencies === 'broken') {
    return 'an operation it depends on failed, was cancelled, or its VERIFIED was contradicted: it can never be sent; cancel it instead';
  }
  if (release.dependencies === 'waiting') {
    return 'an operation it depends on is not done yet: it can be released once that one is';
  }
  return null;
}

/**
 * When a FAILED of this held operation becomes acceptable, if the status model would accept it but not yet: only a
 * sent operation can have a call on its way. Null when FAILED need not wait (or is refused for good).
 */
export function absenceNotYetEvident(input: {
  status: OperationStatus;
  everSent: boolean;
  heldFor: TerminalReason | null;
  acknowledged?: boolean;
  absenceEvidentAt?: Date | null;
  now?: Date;
}): Date | null {
  if (!input.everSent || !input.absenceEvidentAt) return null;
  const gate = {
    actor: 'human',
    verificationMethod: '',
    everSent: input.everSent,
    heldFor: input.heldFor,
    acknowledged: input.acknowledged,
  } as const;
  if (!isOperationTransitionAllowed(input.status, OperationStatus.FAILED, gate)) return null;
  const now = input.now ?? new Date();
  return now < input.absenceEvidentAt ? input.absenceEvidentAt : null;
}
