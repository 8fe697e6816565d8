import type { ApprovalRule } from '@verity/status-model';
import { Column, CreateDateColumn, Entity, PrimaryColumn } from 'typeorm';

/** The tenant's policy, set through `PUT /v1/admin/policy` (camelCase here, snake_case on the wire). */
export interface TenantSettings {
  /** Who owns recovery obligations of this tenant's MANUAL_REVIEW operations. */
  obligationOwner?: string;
  escalationTarget?: string;
  /** Seconds until an obligation is due, per hold reason, and `default` for the others. */
  obligationDueSeconds?: Record<string, number>;
  /** Which operations need approval. When set, it replaces `approvalAmountAbove`. */
  approvalRules?: ApprovalRule[];
  /**
   * Before approval rules: operations above this amount need approval, on every connector that declares where its
   * amount is (`approvalAmountField` in libs/connectors).
   */
  approvalAmountAbove?: number;
  policyUpdatedAt?: string;
  policyUpdatedBy?: string;
}

@Entity('tenants')
export class TenantEntity {
  @PrimaryColumn('text') id!: string;
  @Column('text') name!: string;
  @Column('jsonb', { default: {} }) settings!: TenantSettings;
  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' }) createdAt!: Date;
}
