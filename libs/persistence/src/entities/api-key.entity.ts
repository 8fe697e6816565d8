import { Column, CreateDateColumn, Entity, PrimaryColumn } from 'typeorm';

export type Role = 'agent' | 'reviewer' | 'admin';
export const ROLES: readonly Role[] = ['agent', 'reviewer', 'admin'];

@Entity('api_keys')
export class ApiKeyEntity {
  @PrimaryColumn('text') id!: string;
  @Column('text', { name: 'tenant_id' }) tenantId!: string;
  @Column('text') role!: Role;
  /** sha256 of the key: keys are high-entropy random strings, so a fast hash is enough and lookups stay O(1). */
  @Column('text', { name: 'key_hash', unique: true }) keyHash!: string;
  @Column('text', { name: 'key_prefix' }) keyPrefix!: string;
  @Column('text', { nullable: true }) label!: string | null;
  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' }) createdAt!: Date;
  @Column('timestamptz', { name: 'revoked_at', nullable: true }) revokedAt!: Date | null;
}
