import { Column, CreateDateColumn, Entity, PrimaryColumn } from 'typeorm';

/** The roles of a tenant's keys. */
export type Role = 'agent' | 'reviewer' | 'admin';
export const ROLES: readonly Role[] = ['agent', 'reviewer', 'admin'];

/** Every role a key can have: the tenant roles, and `operator` (the platform: Bull Board, /metrics; no tenant). */
export type KeyRole = Role | 'operator';
export const KEY_ROLES: readonly KeyRole[] = [...ROLES, 'operator'];

@Entity('api_keys')
export class ApiKeyEntity {
  @PrimaryColumn('text') id!: string;
  /** Null exactly for operator keys (a database CHECK holds it): they belong to no tenant. */
  @Column('text', { name: 'tenant_id', nullable: true }) tenantId!: string | null;
  @Column('text') role!: KeyRole;
  /** sha256 of the key: keys are high-entropy random strings, so a fast hash is enough and lookups stay O(1). */
  @Column('text', { name: 'key_hash', unique: true }) keyHash!: string;
  @Column('text', { name: 'key_prefix' }) keyPrefix!: string;
  @Column('text', { nullable: true }) label!: string | null;
  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' }) createdAt!: Date;
  @Column('timestamptz', { name: 'revoked_at', nullable: true }) revokedAt!: Date | null;
}
