import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { ConnectorEnvironment, ConnectorRegistry } from '@verity/connectors';
import {
  Approval,
  CriterionResult,
  EventEntity,
  ExecutionEntity,
  OperationEntity,
  TenantEntity,
  TransitionService,
  connectorEnvironment,
  connectorOperation,
  findExecution,
  findOperations,
  recoveryObligation,
  snapshotOf,
} from '@verity/persistence';
import { LOGGER, Logger, VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { JobName, JobProducer, QueueName } from '@verity/queues';
import {
  ExecutionFailure,
  ExecutionStatus,
  OperationStatus,
  TerminalReason,
  VerificationMethod,
  isSettledOperation,
  isTerminalExecution,
} from '@verity/status-model';
import { DataSource } from 'typeorm';
import { needsApproval } from './operation-rules';

type TenantLoader = (tenantId: string) => Promise<TenantEntity | null>;

export type AdvanceOutcome = 'done' | 'skipped: not found' | 'skipped: terminal' | 'skipped: lost race';

const E = ExecutionStatus;
const S = OperationStatus;

/**
 * Drives one execution through DESIGN §3. Only the dispatcher moves executions (a caller's cancel aside).
 * Every step re-reads the rows and moves by CAS, so duplicate or concurrent advance jobs are harmless.
 */
@Injectable()
export class LifecycleService {
  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly transitions: TransitionService,
    private readonly producer: JobProducer,
    private readonly connectors: ConnectorRegistry,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  async advance(executionId: string): Promise<AdvanceOutcome> {
    let lost = 0;
    // The tenant (its approval policy and settings) is read once per job, not once per step.
    let tenantRow: Promise<TenantEntity | null> | undefined;
    const tenant: TenantLoader = (id) => (tenantRow ??= this.db.getRepository(TenantEntity).findOneBy({ id }));
    for (let step = 0; step < 20; step += 1) {
      const execution = await findExecution(this.db.manager, executionId);
      if (!execution) return 'skipped: not found';
      if (isTerminalExecution(execution.status)) return 'skipped: terminal';
      const operations = await findOperations(this.db.manager, executionId);
      const progressed = await this.step(execution, operations, tenant);
      // A lost CAS means someone else moved a row we read: look again rather than leave the execution where the
      // winner's (possibly older) view put it.
      if (progressed === 'lost') {
        lost += 1;
        continue;
      }
      if (!progressed) return 'done';
    }
    return lost > 0 ? 'skipped: lost race' : 'done';
  }

  /** One move; returns true when something changed and another look is worthwhile. */
  private async step(
    execution: ExecutionEntity,
    operations: OperationEntity[],
    tenant: TenantLoader,
  ): Promise<boolean | 'lost'> {
    if (execution.deadlineAt.getTime() <= Date.now()) {
      await this.cancelPrepared(operations, 'execution_expired');
      return this.move(execution, E.EXPIRED, { reason: 'deadline passed' });
    }
    switch (execution.status) {
      case E.CREATED:
        return this.move(execution, E.VALIDATING);
      case E.VALIDATING:
        return this.validate(execution, operations);
      case E.RESOLVING_CONTEXT:
        await this.resolveContext(execution, operations, tenant);
        return this.move(execution, E.PLANNING);
      case E.PLANNING:
        await this.plan(execution, operations, tenant);
        return this.move(execution, E.RUNNING);
      case E.VALIDATING_OUTPUT:
        return this.complete(execution, operations);
      default:
        return this.run(execution, operations, tenant);
    }
  }

  private async move(
    execution: ExecutionEntity,
    to: ExecutionStatus,
    eventData?: Record<string, unknown>,
    patch?: { failure?: Record<string, unknown>; criteria_results?: unknown[] },
  ): Promise<boolean | 'lost'> {
    if (execution.status === to) return false;
    const result = await this.transitions.execution(this.db.manager, {
      executionId: execution.id,
      from: execution.status,
      to,
      eventData,
      patch,
    });
    return result.won ? true : 'lost';
  }

  /** Re-checks what intake checked: rows can be written by older API versions or by hand. */
  private async validate(execution: ExecutionEntity, operations: OperationEntity[]): Promise<boolean | 'lost'> {
    const problems: string[] = [];
    for (const op of operations) {
      const connector = this.connectors.get(op.connector);
      const action = connector?.actions[op.action];
      if (!connector || !action) {
        problems.push(`${op.key}: unknown connector or action ${op.connector}.${op.action}`);
        continue;
      }
      if (!action.params.safeParse(op.params).success) problems.push(`${op.key}: params do not match the schema`);
    }
    if (problems.length === 0) return this.move(execution, E.RESOLVING_CONTEXT);
    await this.cancelPrepared(operations, 'execution_invalid');
    const failure: ExecutionFailure = {
      code: 'invalid_request',
      phase: E.VALIDATING,
      category: 'caller_error',
      retryable: false,
      message: problems.join('; ').slice(0, 2000),
      at: new Date().toISOString(),
    };
    return this.move(execution, E.FAILED, { failure }, { failure: failure as unknown as Record<string, unknown> });
  }

  /**
   * Connectors that can read the target's state do so. The requested state already present → VERIFIED with
   * no_change_required (Verity does not claim it caused it). A mismatch with what the agent expected is a
   * KNOWLEDGE_CONFLICT: irreversible → held for a human; reversible → proceeds, conflict recorded.
   */
  private async resolveContext(
    execution: ExecutionEntity,
    operations: OperationEntity[],
    loadTenant: TenantLoader,
  ): Promise<void> {
    const tenant = await loadTenant(execution.tenantId);
    for (const op of operations) {
      if (op.status !== S.PREPARED) continue;
      const connector = this.connectors.get(op.connector);
      if (!connector?.readContext) continue;
      const context = await connector.readContext(connectorOperation(op), await this.envFor(op));
      if (context.kind === 'unreachable') {
        await this.transitions.annotate(this.db.manager, {
          executionId: execution.id,
          operationId: op.id,
          type: 'context.unavailable',
          data: { evidence: context.evidence },
        });
        continue;
      }
      if (context.requestedStatePresent && op.verificationMethod === VerificationMethod.READ_AFTER_WRITE) {
        await this.transitions.operation(this.db.manager, {
          operation: snapshotOf(op),
          to: S.VERIFIED,
          patch: {
            no_change_required: true,
            evidence: { method: 'context_read', no_change_required: true, ...context.evidence, state: context.state },
          },
          eventData: { no_change_required: true },
        });
        continue;
      }
      const expectedMismatches = Object.entries(op.expectedState ?? {})
        .filter(([key, expected]) => JSON.stringify(context.state[key]) !== JSON.stringify(expected))
        .map(
          ([key, expected]) =>
            `${key}: expected ${JSON.stringify(expected)}, source has ${JSON.stringify(context.state[key])}`,
        );
      const conflicts = [...context.conflicts, ...expectedMismatches];
      const baseline = context.state;
      if (conflicts.length > 0) {
        const recorded = await this.transitions.annotate(this.db.manager, {
          executionId: execution.id,
          operationId: op.id,
          type: 'knowledge.conflict',
          data: { conflicts, state: context.state, expected_state: op.expectedState, irreversible: op.irreversible },
        });
        if (op.irreversible) {
          await this.transitions.operation(this.db.manager, {
            operation: snapshotOf(op),
            to: S.MANUAL_REVIEW,
            reason: TerminalReason.KNOWLEDGE_CONFLICT,
            patch: {
              evidence: { method: 'context_read', conflicts, ...context.evidence, state: context.state },
              obligation: this.obligation(TerminalReason.KNOWLEDGE_CONFLICT, false, tenant) as unknown as Record<
                string,
                unknown
              >,
            },
            eventData: { conflicts, conflict_event_id: recorded.eventId },
          });
          continue;
        }
      }
      // Remember what the source looked like: an approval given now is stale if this changes before dispatch.
      // (A decision that arrived early is kept: the baseline is merged into it.)
      if (!needsApproval(op, tenant?.settings) && op.approval === null) continue;
      await this.db.query(`UPDATE operations SET approval = coalesce(approval, '{}'::jsonb) || $2 WHERE id = $1`, [
        op.id,
        JSON.stringify({ baseline }),
      ]);
    }
  }

  /** Decide which operations need approval; a decision that arrived early is kept, not asked again. */
  private async plan(
    execution: ExecutionEntity,
    operations: OperationEntity[],
    loadTenant: TenantLoader,
  ): Promise<void> {
    const tenant = await loadTenant(execution.tenantId);
    const fresh = await findOperations(this.db.manager, execution.id);
    for (const op of fresh.length ? fresh : operations) {
      if (op.status !== S.PREPARED || !needsApproval(op, tenant?.settings)) continue;
      if (op.approval?.state === 'granted' || op.approval?.state === 'denied' || op.approval?.state === 'requested') {
        continue;
      }
      const approval: Approval = { ...(op.approval ?? {}), state: 'requested', requested_at: new Date().toISOString() };
      await this.transitions.annotate(this.db.manager, {
        executionId: execution.id,
        operationId: op.id,
        whileStatus: S.PREPARED,
        patch: { approval: approval as unknown as Record<string, unknown> },
        type: 'approval.requested',
        data: { policy: op.requiresApproval ? 'requires_approval' : 'tenant_policy' },
      });
    }
  }

  /** running ⇄ waiting_for_tool ⇄ waiting_for_approval: dispatch what is ready, cancel what can never run. */
  private async run(
    execution: ExecutionEntity,
    operations: OperationEntity[],
    loadTenant: TenantLoader,
  ): Promise<boolean | 'lost'> {
    const tenant = await loadTenant(execution.tenantId);
    const latestByKey = new Map<string, OperationEntity>();
    for (const op of operations) latestByKey.set(op.key, op);
    let changed = false;
    let awaitingApproval = 0;
    let ready = 0;
    for (const op of operations) {
      if (op.status !== S.PREPARED) continue;
      const deps = op.dependsOn.map((key) => latestByKey.get(key));
      const broken = deps.find((d) => !d || d.status === S.FAILED || d.status === S.CANCELLED);
      if (broken !== undefined || deps.some((d) => d === undefined)) {
        const moved = await this.transitions.operation(this.db.manager, {
          operation: snapshotOf(op),
          to: S.CANCELLED,
          eventData: { cause: 'dependency_not_done', dependency: broken?.key, dependency_status: broken?.status },
        });
        changed ||= moved.won;
        continue;
      }
      if (!deps.every((d) => d && this.dependencySatisfied(d))) continue;
      if (needsApproval(op, tenant?.settings)) {
        if (op.approval?.state === 'denied') {
          const moved = await this.transitions.operation(this.db.manager, {
            operation: snapshotOf(op),
            to: S.CANCELLED,
            eventData: { cause: 'approval_denied' },
          });
          changed ||= moved.won;
          continue;
        }
        if (op.approval?.state !== 'granted') {
          awaitingApproval += 1;
          if (op.approval?.state !== 'requested') await this.plan(execution, [op], loadTenant);
          continue;
        }
      }
      ready += 1;
      await this.enqueueDispatch(op);
    }
    if (changed) return true;
    const allSettled = operations.every((op) => isSettledOperation(op.status, op.verificationMethod));
    if (allSettled) return this.move(execution, E.VALIDATING_OUTPUT);
    const inFlight = operations.some(
      (op) => op.status !== S.PREPARED && !isSettledOperation(op.status, op.verificationMethod),
    );
    let target: ExecutionStatus;
    if (ready > 0) target = E.RUNNING;
    else if (awaitingApproval > 0 && !inFlight) target = E.WAITING_FOR_APPROVAL;
    else target = E.WAITING_FOR_TOOL;
    if (target === execution.status) return false;
    const moved = await this.move(execution, target);
    // A status change of the execution alone needs no second look: operations have not moved.
    return moved === 'lost' ? 'lost' : false;
  }

  /**
   * One dispatch job per operation (`<op>.dispatch`), so enqueueing twice is harmless. A finished job (completed or
   * failed) for an operation that is still PREPARED never sent it — SENT is committed before any call — yet its id,
   * kept for an hour, would swallow this enqueue: an operation sent back for approval, or whose job failed before
   * the commit (a database error), would never be dispatched again. Such a job is removed and the operation
   * re-armed; the PREPARED → SENT compare-and-set, not the job id, is what guarantees a single send.
   */
  private async enqueueDispatch(op: OperationEntity): Promise<void> {
    const jobId = `${op.id}.dispatch`;
    const existing = await this.producer.queue(QueueName.DISPATCH).getJob(jobId);
    if (existing) {
      const state = await existing.getState();
      if (state === 'completed' || state === 'failed') await existing.remove().catch(() => undefined);
      else if (state !== 'unknown') return; // waiting, delayed or active: it will run
    }
    await this.producer.enqueue(JobName.DISPATCH_OPERATION, { operationId: op.id }, { jobId });
  }

  /** Dependencies are met when the effect is VERIFIED, or ACKNOWLEDGED where nothing can read it back. */
  private dependencySatisfied(dep: OperationEntity): boolean {
    if (dep.status === S.VERIFIED) return true;
    return dep.status === S.ACKNOWLEDGED && dep.verificationMethod !== VerificationMethod.READ_AFTER_WRITE;
  }

  /** validating_output: evaluate the agent's criteria, each with the events that prove its verdict. */
  private async complete(execution: ExecutionEntity, operations: OperationEntity[]): Promise<boolean | 'lost'> {
    const latestByKey = new Map<string, OperationEntity>();
    for (const op of operations) latestByKey.set(op.key, op);
    const results: CriterionResult[] = [];
    for (const criterion of execution.criteria) {
      const op = latestByKey.get(criterion.operation);
      if (!op) {
        results.push({ ...criterion, verdict: 'not_applicable', evidence_event_ids: [] });
        continue;
      }
      const evidence = await this.db.getRepository(EventEntity).find({
        where: { operationId: op.id, toStatus: op.status },
        order: { seq: 'ASC' },
        select: { id: true },
      });
      results.push({
        ...criterion,
        verdict: op.status === criterion.expect_status ? 'pass' : 'fail',
        evidence_event_ids: evidence.map((e) => e.id),
      });
    }
    return this.move(
      execution,
      E.COMPLETED,
      { criteria: results.map((r) => ({ key: r.key, verdict: r.verdict })) },
      { criteria_results: results },
    );
  }

  /** I11: only never-sent operations are cancelled; anything already SENT keeps being reconciled. */
  private async cancelPrepared(operations: OperationEntity[], cause: string): Promise<void> {
    for (const op of operations) {
      if (op.status !== S.PREPARED) continue;
      await this.transitions.operation(this.db.manager, {
        operation: snapshotOf(op),
        to: S.CANCELLED,
        eventData: { cause },
      });
    }
  }

  private obligation(reason: TerminalReason, everSent: boolean, tenant: TenantEntity | null) {
    return recoveryObligation({
      reason,
      everSent,
      settings: tenant?.settings,
      now: new Date(),
      dueInMs: this.config.OBLIGATION_DUE_MS,
    });
  }

  /** Context reads go through the tenant's connector settings (egress allowlist, secrets) like sends do. */
  private envFor(op: OperationEntity): Promise<ConnectorEnvironment> {
    const base = { sandboxUrl: this.config.SANDBOX_URL, timeoutMs: this.config.CONNECTOR_TIMEOUT_MS };
    return connectorEnvironment(
      this.db.manager,
      op,
      base,
      this.connectors.get(op.connector)?.settings?.secrets === true,
    );
  }

  logSkip(executionId: string, outcome: AdvanceOutcome): void {
    if (outcome !== 'done') this.logger.debug({ executionId, outcome }, 'advance');
  }
}
