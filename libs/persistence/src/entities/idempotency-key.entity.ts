import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity('idempotency_keys')
export class IdempotencyKeyEntity {
  @PrimaryColumn('text', { name: 'tenant_id' }) tenantId!: string;
  @PrimaryColumn('text') key!: string;
  @Column('text', { name: 'request_hash' }) requestHash!: string;
  @Column('text', { name: 'execution_id', nullable: true }) executionId!: string | null;
  @Column('text') state!: 'in_flight' | 'completed';
  @Column('timestamptz', { name: 'created_at' }) createdAt!: Date;
  @Column('timestamptz', { name: 'expires_at' }) expiresAt!: Date;
}
