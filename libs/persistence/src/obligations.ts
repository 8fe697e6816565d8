import { OperationStatus, TerminalReason, permittedResolutions } from '@verity/status-model';
import type { OperationEntity, RecoveryObligation } from './entities';
import type { TenantSettings } from './entities';
import type { EffectShown } from './checks.repository';

export const DEFAULT_OBLIGATION_OWNER = 'operations';
export const DEFAULT_ESCALATION_TARGET = 'on-call';

const EVIDENCE_REQUIRED: Record<string, string> = {
  [TerminalReason.INTEGRITY_MISMATCH]:
    'the provider record that was read back, and whether the difference is acceptable or must be reversed',
  [TerminalReason.STALE_REPLICA]:
    'a read from the provider primary (or its dashboard) showing whether the effect exists',
  [TerminalReason.FIELD_MISSING]: 'the provider record with the missing field, confirmed by other means',
  [TerminalReason.SOURCE_UNREACHABLE]: 'the provider dashboard or support confirmation of whether the effect exists',
  [TerminalReason.KNOWLEDGE_CONFLICT]:
    'why the agent’s expected state differs from the source, and whether sending is still wanted',
  [TerminalReason.CONNECTOR_ERROR]:
    'the provider dashboard or delivery report showing whether the effect exists (never re-send blindly)',
};

/**
 * A MANUAL_REVIEW operation always carries a recovery obligation (docs/semantics.md): who owns it, what evidence closes
 * it, which actions the status model permits, by when, and who is told if it is overdue.
 */
export function recoveryObligation(input: {
  reason: TerminalReason;
  everSent: boolean;
  /** The provider acknowledged the send: FAILED is then not among the permitted actions. */
  acknowledged?: boolean;
  /** The provider's rejection of the send is on file: VERIFIED is then not among the permitted actions. */
  rejected?: boolean;
  /** A read of the source showed a record of the effect before the hold: kept on it, and FAILED is not permitted. */
  effectShown?: EffectShown | null;
  settings: TenantSettings | null | undefined;
  now: Date;
  /** When the tenant's policy names no due time for this reason. */
  dueInMs: number;
}): RecoveryObligation {
  return {
    reason: input.reason,
    owner: input.settings?.obligationOwner ?? DEFAULT_OBLIGATION_OWNER,
    evidence_required: EVIDENCE_REQUIRED[input.reason] ?? 'evidence of the operation’s real outcome',
    permitted_actions: permittedResolutions(
      OperationStatus.MANUAL_REVIEW,
      input.everSent,
      input.reason,
      input.acknowledged ?? false,
      Boolean(input.effectShown),
      input.rejected ?? false,
    ),
    due_at: new Date(input.now.getTime() + obligationDueMs(input.settings, input.reason, input.dueInMs)).toISOString(),
    escalation_target: input.settings?.escalationTarget ?? DEFAULT_ESCALATION_TARGET,
    escalated_at: null,
    ...(input.effectShown && { effect_shown: input.effectShown }),
  };
}

/** How long an obligation held for `reason` may stay open: the tenant's time for the reason, its default, or ours. */
export function obligationDueMs(
  settings: TenantSettings | null | undefined,
  reason: TerminalReason | string,
  fallbackMs: number,
): number {
  const seconds = settings?.obligationDueSeconds?.[reason] ?? settings?.obligationDueSeconds?.default;
  return typeof seconds === 'number' ? seconds * 1000 : fallbackMs;
}

export interface RecordedResolution {
  status: string;
  by?: string;
  at?: string;
}

/**
 * The resolution recorded on the operation's obligation, if a reviewer already decided (a release waiting for the
 * dispatcher included): nothing more is permitted on that hold.
 */
export function recordedResolution(op: Pick<OperationEntity, 'obligation'>): RecordedResolution | null {
  const resolution = (op.obligation as { resolution?: RecordedResolution } | null)?.resolution;
  return resolution?.status ? resolution : null;
}
