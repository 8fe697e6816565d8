import { ExecutionFailure, ExecutionStatus } from '@verity/status-model';
import { Column, Entity, PrimaryColumn } from 'typeorm';

export interface Criterion {
  key: string;
  operation: string;
  expect_status: string;
}

export interface CriterionResult extends Criterion {
  verdict: 'pass' | 'fail' | 'not_applicable';
  evidence_event_ids: string[];
}

@Entity('executions')
export class ExecutionEntity {
  @PrimaryColumn('text') id!: string;
  @Column('text', { name: 'tenant_id' }) tenantId!: string;
  @Column('text', { name: 'agent_id' }) agentId!: string;
  @Column('text') intent!: string;
  @Column('text') status!: ExecutionStatus;
  @Column('timestamptz', { name: 'deadline_at' }) deadlineAt!: Date;
  @Column('jsonb', { default: [] }) criteria!: Criterion[];
  @Column('jsonb', { name: 'criteria_results', nullable: true }) criteriaResults!: CriterionResult[] | null;
  @Column('jsonb', { nullable: true }) failure!: ExecutionFailure | null;
  @Column('bigint', { name: 'event_seq', default: 0 }) eventSeq!: string;
  @Column('text', { name: 'idempotency_key', nullable: true }) idempotencyKey!: string | null;
  @Column('timestamptz', { name: 'created_at' }) createdAt!: Date;
  @Column('timestamptz', { name: 'updated_at' }) updatedAt!: Date;
}
