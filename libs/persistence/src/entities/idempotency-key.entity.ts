import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity('idempotency_keys')
export class IdempotencyKeyEntity {
  @PrimaryColumn('text', { name: 'tenant_id' }) tenantId!: string;
  /** The route the key was sent to (`executions`, `webhooks`): each route has its own keys. */
  @PrimaryColumn('text') route!: 'executions' | 'webhooks';
  @PrimaryColumn('text') key!: string;
  @Column('text', { name: 'request_hash' }) requestHash!: string;
  @Column('text', { name: 'execution_id', nullable: true }) executionId!: string | null;
  @Column('text', { name: 'webhook_endpoint_id', nullable: true }) webhookEndpointId!: string | null;
  @Column('text') state!: 'in_flight' | 'completed';
  @Column('timestamptz', { name: 'created_at' }) createdAt!: Date;
  @Column('timestamptz', { name: 'expires_at' }) expiresAt!: Date;
}
