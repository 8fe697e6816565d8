import { IllegalTransitionError, StatusModelErrorCode } from './errors';
import { ExecutionStatus, canMoveExecution } from './execution';
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
  if (found.humanOnly && actor !== 'human') {
    fail(StatusModelErrorCode.HUMAN_ONLY, 'only a human resolution may take this move');
  }
  if (found.neverSentOnly && context.everSent) {
    fail(StatusModelErrorCode.ALREADY_SENT, 'the operation was already handed to a connector');
  }
  if (found.sentOnly && !context.everSent) {
    fail(StatusModelErrorCode.NEVER_SENT, 'the operation was never sent: there is no outcome to judge');
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
  if (to === OperationStatus.VERIFIED && !found.humanOnly) {
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

/** The permitted actions of a recovery obligation: never sent → SENT or CANCELLED; sent → VERIFIED or FAILED. */
export function permittedResolutions(status: OperationStatus, everSent: boolean): ResolutionStatus[] {
  if (status !== OperationStatus.MANUAL_REVIEW) return [];
  const candidates: ResolutionStatus[] = [
    OperationStatus.VERIFIED,
    OperationStatus.FAILED,
    OperationStatus.SENT,
    OperationStatus.CANCELLED,
  ];
  return candidates.filter((to) => {
    return isOperationTransitionAllowed(status, to, { actor: 'human', verificationMethod: '', everSent });
  });
}
