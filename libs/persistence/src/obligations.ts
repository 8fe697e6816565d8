import { OperationStatus, TerminalReason, permittedResolutions } from '@verity/status-model';
import type { RecoveryObligation } from './entities';
import type { TenantSettings } from './entities';

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
 * A MANUAL_REVIEW operation always carries a recovery obligation (reference 002): who owns it, what evidence closes
 * it, which actions the status model permits, by when, and who is told if it is overdue.
 */
export function recoveryObligation(input: {
  reason: TerminalReason;
  everSent: boolean;
  settings: TenantSettings | null | undefined;
  now: Date;
  dueInMs: number;
}): RecoveryObligation {
  return {
    reason: input.reason,
    owner: input.settings?.obligationOwner ?? 'operations',
    evidence_required: EVIDENCE_REQUIRED[input.reason] ?? 'evidence of the operation’s real outcome',
    permitted_actions: permittedResolutions(OperationStatus.MANUAL_REVIEW, input.everSent, input.reason),
    due_at: new Date(input.now.getTime() + input.dueInMs).toISOString(),
    escalation_target: input.settings?.escalationTarget ?? 'on-call',
    escalated_at: null,
  };
}
