import { Column, CreateDateColumn, Entity, PrimaryColumn } from 'typeorm';

export interface TenantSettings {
  /** Who owns recovery obligations of this tenant's MANUAL_REVIEW operations. */
  obligationOwner?: string;
  escalationTarget?: string;
  /** Payments above this amount (minor units) need approval. */
  approvalAmountAbove?: number;
}

@Entity('tenants')
export class TenantEntity {
  @PrimaryColumn('text') id!: string;
  @Column('text') name!: string;
  @Column('jsonb', { default: {} }) settings!: TenantSettings;
  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' }) createdAt!: Date;
}
