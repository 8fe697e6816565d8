import {
  type Execution,
  type Operation,
  OperationStatus,
  UNCERTAIN_EFFECT_STATUSES,
  VerificationMethod,
  isTerminalExecution,
} from '@verity/sdk';

export const EFFECTS_TEXT: Record<string, string> = {
  all_verified: 'Every operation is VERIFIED: each effect was confirmed against its source.',
  partial: 'Some effects are verified and others never happened (failed or cancelled).',
  none: 'No effect exists: every operation failed, was cancelled or was never sent.',
  unverified: 'Effects were accepted by the provider but not all of them can be read back to confirm them.',
  unknown: 'At least one effect may or may not exist (sent, unknown, reconciling or in manual review).',
};

/**
 * When the agent's work is over but the effect is not confirmed, say so in words: a green "completed" must never
 * be read as "it happened".
 */
export function divergence(
  execution: Pick<Execution, 'status'>,
  op: Pick<Operation, 'status' | 'verification_method' | 'attempt' | 'commit'>,
): { tone: 'warn' | 'info'; text: string } | null {
  if (!isTerminalExecution(execution.status) || op.status === OperationStatus.VERIFIED) return null;
  const head = `The execution is ${execution.status} (the agent’s work is over), but this operation’s effect is ${op.status}: `;
  if (failureContradicted(op)) return { tone: 'warn', text: `${head}${CONTRADICTED_FAILURE}. Never retry it blindly.` };
  if (op.status === OperationStatus.ACKNOWLEDGED && op.verification_method !== VerificationMethod.READ_AFTER_WRITE) {
    return {
      tone: 'info',
      text: `${head}the provider accepted it, and nothing can be read back to confirm it happened.`,
    };
  }
  if (op.status === OperationStatus.MANUAL_REVIEW && op.attempt === 0) {
    return { tone: 'warn', text: `${head}it was never sent and is held for a reviewer’s decision.` };
  }
  // Acknowledged but not yet read back is as uncertain as sent: the read-back may still find nothing.
  if (op.status === OperationStatus.ACKNOWLEDGED || UNCERTAIN_EFFECT_STATUSES.includes(op.status)) {
    return { tone: 'warn', text: `${head}it may or may not have happened in the world. Never retry it blindly.` };
  }
  return { tone: 'info', text: `${head}no effect exists.` };
}

const CONTRADICTED_FAILURE =
  'recorded as failed, but contradicted since (the provider then accepted the request, or its source showed the ' +
  'effect): it may have happened in the world';

/**
 * A FAILED the API shows with `commit: "unknown"`: its "no effect exists" was refuted after it was recorded (a late 2xx,
 * or a read of the source after the resolution that showed the effect — status model `failureRefuted`).
 */
export function failureContradicted(op: Pick<Operation, 'status' | 'commit'>): boolean {
  return op.status === OperationStatus.FAILED && op.commit === 'unknown';
}

/** What the operation's effect card says: the status' meaning, except for a FAILED contradicted since. */
export function effectMeaning(op: Pick<Operation, 'status' | 'commit'>, meaning: string | undefined): string {
  return failureContradicted(op) ? CONTRADICTED_FAILURE : (meaning ?? op.status);
}

/**
 * What a reviewer's re-check written after the fact is, in words beside what it read: one recorded after the hold was
 * decided (`decided_meanwhile`, the status it was decided to) or after another read had refuted the FAILED
 * (`refutation_on_record`) changed nothing, so an "absent" beside a VERIFIED reads as what it is; one whose job started
 * after the decision made no read at all (`result` null), which it says, as does one that found the hold open but could
 * not read it back (`cannot_read_back`, why). Null for any other event. The status and the reason come from the
 * event's data: the caller shows them as text (`shown()`), never as markup.
 */
export function recheckNote(event: { type: string; data?: Record<string, unknown> | null }): string | null {
  if (event.type !== 'operation.rechecked' || !event.data) return null;
  const {
    decided_meanwhile: decided,
    refutation_on_record: refutation,
    cannot_read_back: unreadable,
    result,
  } = event.data;
  if (decided !== undefined && decided !== null) {
    if (result === null) return `not read: the hold was decided (${String(decided)}) before the re-check ran`;
    return `read after the hold was decided (${String(decided)}): changed nothing`;
  }
  if (refutation === true) return 'read after the FAILED’s refutation was on record: changed nothing';
  if (unreadable !== undefined && unreadable !== null) {
    const why = CANNOT_READ_BACK.get(String(unreadable)) ?? `cannot read it back (${String(unreadable)})`;
    return `not read: ${why}; the hold stands as it was`;
  }
  return null;
}

/** Why a reviewer's re-check of a hold still open made no read (`cannot_read_back`), in words. */
const CANNOT_READ_BACK: ReadonlyMap<string, string> = new Map([
  ['connector_unavailable', 'the reconciler has no connector for it now'],
  ['no_read_back', 'its connector no longer reads this operation back'],
]);
