import { Column, Entity, PrimaryColumn } from 'typeorm';

/** Append-only (a trigger refuses UPDATE and DELETE); `seq` orders events within one execution with no gaps. */
@Entity('events')
export class EventEntity {
  @PrimaryColumn('text') id!: string;
  @Column('text', { name: 'execution_id' }) executionId!: string;
  @Column('text', { name: 'tenant_id' }) tenantId!: string;
  @Column('bigint') seq!: string;
  @Column('text', { name: 'operation_id', nullable: true }) operationId!: string | null;
  @Column('text') type!: string;
  @Column('text', { name: 'from_status', nullable: true }) fromStatus!: string | null;
  @Column('text', { name: 'to_status', nullable: true }) toStatus!: string | null;
  @Column('jsonb') data!: Record<string, unknown>;
  @Column('timestamptz', { name: 'created_at' }) createdAt!: Date;
}
