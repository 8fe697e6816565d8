import { Criterion, CriterionVerdict, ExecutionFailure, ExecutionStatus, Outcome } from '@verity/status-model';
import { Column, Entity, PrimaryColumn } from 'typeorm';

export type { Criterion };

/** One criterion as last judged: the verdict, why, and the events behind it. */
export type CriterionResult = Criterion & {
  verdict: CriterionVerdict;
  rationale: string;
  evidence_event_ids: string[];
};

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
  @Column('jsonb', { nullable: true }) outcome!: Outcome | null;
  @Column('bigint', { name: 'event_seq', default: 0 }) eventSeq!: string;
  @Column('text', { name: 'idempotency_key', nullable: true }) idempotencyKey!: string | null;
  @Column('timestamptz', { name: 'created_at' }) createdAt!: Date;
  @Column('timestamptz', { name: 'updated_at' }) updatedAt!: Date;
  /** The W3C traceparent of the request that created it; null with traces off. */
  @Column('text', { name: 'trace_parent', nullable: true }) traceParent!: string | null;
}
