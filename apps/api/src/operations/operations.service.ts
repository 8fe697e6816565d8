import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import {
  Approval,
  OperationEntity,
  TransitionService,
  findExecution,
  findOperation,
  insertExecution,
  isUniqueViolation,
  snapshotOf,
  transaction,
} from '@verity/persistence';
import { VERITY_CONFIG, VerityConfig, newId } from '@verity/platform';
import { JobName, JobProducer } from '@verity/queues';
import { OperationStatus, canRetry, permittedResolutions, retryRuleOf } from '@verity/status-model';
import { DataSource } from 'typeorm';
import type { Principal } from '../auth/principal';
import { Problem } from '../problem/problem';
import { presentExecution, presentOperation } from '../executions/presenter';

@Injectable()
export class OperationsService {
  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly transitions: TransitionService,
    private readonly producer: JobProducer,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
  ) {}

  private async load(principal: Principal, id: string): Promise<OperationEntity> {
    const op = await findOperation(this.db.manager, id, principal.tenantId);
    if (!op) throw Problem.notFound('Operation', id);
    return op;
  }

  async get(principal: Principal, id: string) {
    const op = await this.load(principal, id);
    return { ...presentOperation(op), permitted_resolutions: permittedResolutions(op.status, op.attempt > 0) };
  }

  /**
   * A decision is kept even when it arrives before the operation starts waiting (planning has not run yet):
   * planning finds it and does not ask again.
   */
  async decide(principal: Principal, id: string, decision: 'approve' | 'deny', reason: string | undefined) {
    const op = await this.load(principal, id);
    if (op.status !== OperationStatus.PREPARED) {
      throw Problem.conflict(
        'not-awaiting-approval',
        `the operation is ${op.status}; only a PREPARED operation can be approved`,
        {
          current_status: op.status,
        },
      );
    }
    if (op.approval?.state && op.approval.state !== 'requested') {
      throw Problem.conflict('already-decided', `the operation was already ${op.approval.state}`, {
        approval: op.approval.state,
      });
    }
    const now = new Date();
    const approval: Approval = {
      ...(op.approval ?? {}),
      state: decision === 'approve' ? 'granted' : 'denied',
      decided_at: now.toISOString(),
      decided_by: principal.keyId,
      reason,
      expires_at:
        decision === 'approve' ? new Date(now.getTime() + this.config.APPROVAL_TTL_MS).toISOString() : undefined,
    };
    const annotated = await this.transitions.annotate(this.db.manager, {
      executionId: op.executionId,
      operationId: op.id,
      whileStatus: OperationStatus.PREPARED,
      patch: { approval: approval as unknown as Record<string, unknown> },
      type: 'approval.decided',
      data: { decision, reason, by: principal.keyId },
    });
    if (!annotated.won) throw Problem.conflict('not-awaiting-approval', 'the operation moved on; reload it');
    if (decision === 'deny') {
      await this.transitions.operation(this.db.manager, {
        operation: snapshotOf(op),
        to: OperationStatus.CANCELLED,
        eventData: { cause: 'approval_denied', by: principal.keyId, reason },
      });
    }
    await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: op.executionId });
    return this.get(principal, id);
  }

  /**
   * Resolution of MANUAL_REVIEW by a human, only with an action the status model permits. Releasing a never-sent
   * operation (SENT) is recorded here and carried out by the dispatcher, which commits SENT right before it calls
   * the connector — so "SENT is committed before the call, by the caller" holds for human releases too.
   */
  async resolve(principal: Principal, id: string, status: OperationStatus, evidence: string) {
    const op = await this.load(principal, id);
    const permitted = permittedResolutions(op.status, op.attempt > 0);
    if (!permitted.includes(status as (typeof permitted)[number])) {
      throw Problem.conflict(
        'resolution-not-permitted',
        op.status === OperationStatus.MANUAL_REVIEW
          ? `${status} is not permitted for this operation; permitted: ${permitted.join(', ')}`
          : `the operation is ${op.status}, not MANUAL_REVIEW`,
        { current_status: op.status, permitted_resolutions: permitted },
      );
    }
    const resolution = { status, evidence, by: principal.keyId, at: new Date().toISOString() };
    if (status === OperationStatus.SENT) {
      const released = await this.transitions.annotate(this.db.manager, {
        executionId: op.executionId,
        operationId: op.id,
        whileStatus: OperationStatus.MANUAL_REVIEW,
        patch: { obligation: { ...(op.obligation ?? {}), resolution } },
        type: 'operation.release_requested',
        data: resolution,
      });
      if (!released.won) throw Problem.conflict('operation-moved', 'the operation moved on; reload it');
      await this.producer.tryEnqueue(JobName.DISPATCH_OPERATION, { operationId: op.id }, { jobId: `${op.id}.release` });
      return this.get(principal, id);
    }
    const moved = await this.transitions.operation(this.db.manager, {
      operation: snapshotOf(op),
      to: status,
      actor: 'human',
      patch: {
        evidence: { ...(op.evidence ?? {}), resolution },
        obligation: op.obligation ? { ...op.obligation, resolution } : null,
      },
      eventData: { resolution },
    });
    if (!moved.won) throw Problem.conflict('operation-moved', 'the operation moved on; reload it');
    await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: op.executionId });
    return this.get(principal, id);
  }

  /**
   * I5: a retry is a new operation (retry_of), only from FAILED or CANCELLED. It runs as a new execution, so the
   * original execution's history stays exactly as it happened.
   */
  async retry(principal: Principal, id: string) {
    const op = await this.load(principal, id);
    if (!canRetry(op.status)) {
      const rule = retryRuleOf(op.status);
      throw Problem.conflict('retry-not-allowed', `retry is ${rule} for an operation in ${op.status}`, {
        current_status: op.status,
        retry: rule,
      });
    }
    const original = await findExecution(this.db.manager, op.executionId, principal.tenantId);
    if (!original) throw Problem.notFound('Operation', id);
    const executionId = newId('exe');
    const operationId = newId('op');
    try {
      await transaction(this.db, async (tx) => {
        await insertExecution(tx, {
          id: executionId,
          tenantId: principal.tenantId,
          agentId: original.agentId,
          intent: `Retry of ${op.id} (${op.key}) from ${original.id}: ${original.intent}`.slice(0, 4000),
          deadlineSeconds: 600,
          criteria: [],
          idempotencyKey: null,
          createdEventId: newId('evt'),
          operations: [
            {
              id: operationId,
              key: op.key,
              position: 0,
              connector: op.connector,
              action: op.action,
              params: op.params,
              irreversible: op.irreversible,
              requires_approval: op.requiresApproval,
              verification_method: op.verificationMethod,
              expected_state: op.expectedState,
              depends_on: [],
              approval: null,
            },
          ],
        });
        await tx.query(`UPDATE operations SET retry_of = $2 WHERE id = $1`, [operationId, op.id]);
      });
    } catch (error) {
      if (isUniqueViolation(error)) throw Problem.conflict('already-retried', `operation ${op.id} was already retried`);
      throw error;
    }
    await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId });
    const execution = await findExecution(this.db.manager, executionId);
    const created = await findOperation(this.db.manager, operationId);
    return {
      operation: presentOperation(created!),
      execution: presentExecution(execution!, [created!]),
    };
  }
}
