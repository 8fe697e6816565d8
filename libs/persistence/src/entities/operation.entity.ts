import { OperationStatus, TerminalReason, VerificationMethodValue } from '@verity/status-model';
import { Column, Entity, PrimaryColumn } from 'typeorm';

export type ApprovalState = 'requested' | 'granted' | 'denied';

export interface Approval {
  state: ApprovalState;
  requested_at?: string;
  decided_at?: string;
  decided_by?: string;
  reason?: string;
  expires_at?: string;
  /** What the source looked like when the grant was given; a different baseline at dispatch is stale. */
  baseline?: unknown;
}

export interface RecoveryObligation {
  reason: string;
  owner: string;
  evidence_required: string;
  permitted_actions: string[];
  due_at: string;
  escalation_target: string;
  escalated_at: string | null;
  /** How many times the source was read again while held (automatic re-checks and a reviewer's requests). */
  rechecks?: number;
  /**
   * A re-check made while held whose read showed the effect (found, or found with other values), the first one: a
   * record of the effect is on file, and a person's FAILED is refused since (status model `refusedWhenEffectShown`).
   */
  effect_shown?: { result: string; evidence: unknown; at: string };
  /** "Still unknown after investigation" by a reviewer: each keeps the hold and re-dates the obligation. */
  investigations?: { evidence: string; by: string; at: string; previous_due_at: string; due_at: string }[];
  /**
   * A re-check whose read raced a reviewer's FAILED and showed the effect (recorded after the FAILED, with its event
   * `operation.rechecked` `after: "FAILED"`): the FAILED is refuted (status model `failureRefuted`).
   */
  effect_shown_after_failed?: { result: string; at: string };
}

/** The provider's answer to a send that came back late, as its connector classified it (no body, no secret). */
export interface LateRejection {
  /** CONNECTOR_REJECTED (the provider's 4xx), or SOURCE_UNREACHABLE (never delivered). */
  reason: string;
  /** In words, with the HTTP status: "provider rejected the request (402)". */
  detail: string;
  /** The provider's error code (`{ code }`), when its answer had one. */
  provider_error?: Record<string, unknown>;
  /** A send refused by a rule before any call: which cause and rule. */
  cause?: string;
  refusal?: string;
}

export type Observation = 'converged' | 'superseded' | 'degraded' | 'unavailable';

@Entity('operations')
export class OperationEntity {
  @PrimaryColumn('text') id!: string;
  @Column('text', { name: 'execution_id' }) executionId!: string;
  @Column('text', { name: 'tenant_id' }) tenantId!: string;
  @Column('text') key!: string;
  @Column('int') generation!: number;
  @Column('int') position!: number;
  @Column('text') connector!: string;
  @Column('text') action!: string;
  @Column('jsonb') params!: Record<string, unknown>;
  @Column('boolean') irreversible!: boolean;
  @Column('boolean', { name: 'requires_approval' }) requiresApproval!: boolean;
  @Column('text', { name: 'verification_method' }) verificationMethod!: VerificationMethodValue;
  @Column('jsonb', { name: 'expected_state', nullable: true }) expectedState!: Record<string, unknown> | null;
  @Column('text', { name: 'depends_on', array: true }) dependsOn!: string[];
  /**
   * The caller's own name for the effect at a provider that does not deduplicate (a connector's `resendReference`):
   * intake refuses a new operation naming the one of an unsettled send (`409 reference-unsettled`). Null otherwise.
   */
  @Column('text', { name: 'resend_ref', nullable: true }) resendRef!: string | null;
  @Column('text') status!: OperationStatus;
  @Column('text', { name: 'terminal_reason', nullable: true }) terminalReason!: TerminalReason | null;
  /** Fencing token: bumped when SENT is committed; a late write carrying an older attempt loses its CAS. */
  @Column('int') attempt!: number;
  @Column('jsonb', { nullable: true }) evidence!: Record<string, unknown> | null;
  @Column('boolean', { name: 'no_change_required' }) noChangeRequired!: boolean;
  @Column('text', { name: 'retry_of', nullable: true }) retryOf!: string | null;
  @Column('jsonb', { nullable: true }) approval!: Approval | null;
  @Column('jsonb', { nullable: true }) obligation!: RecoveryObligation | null;
  @Column('text', { nullable: true }) observation!: Observation | null;
  /** What the provider told us when it acknowledged (its id, version): the key for read-back. */
  @Column('jsonb', { name: 'provider_ref', nullable: true }) providerRef!: Record<string, unknown> | null;
  @Column('int', { name: 'check_count' }) checkCount!: number;
  @Column('timestamptz', { name: 'sent_at', nullable: true }) sentAt!: Date | null;
  @Column('timestamptz', { name: 'acknowledged_at', nullable: true }) acknowledgedAt!: Date | null;
  /**
   * When the provider's rejection of the send came back after the send was marked UNKNOWN (a late 4xx: status model
   * LATE_REJECTION_TRIES), and what it said, as classified (`rejection`). A person's VERIFIED is refused while it is
   * set; a VERIFIED it comes after is contradicted (commit unknown).
   */
  @Column('timestamptz', { name: 'rejected_at', nullable: true }) rejectedAt!: Date | null;
  @Column('jsonb', { nullable: true }) rejection!: LateRejection | null;
  @Column('timestamptz', { name: 'next_check_at', nullable: true }) nextCheckAt!: Date | null;
  @Column('timestamptz', { name: 'created_at' }) createdAt!: Date;
  @Column('timestamptz', { name: 'updated_at' }) updatedAt!: Date;
}
