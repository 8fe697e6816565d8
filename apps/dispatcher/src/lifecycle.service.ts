import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { Connector, ConnectorRegistry } from '@verity/connectors';
import {
  Approval,
  ExecutionEntity,
  ExecutionPatch,
  OperationEntity,
  TenantEntity,
  TransitionService,
  connectorEnvironment,
  connectorOperation,
  findExecutionWithOperations,
  findOperations,
  findTenant,
  lockExecution,
  recoveryObligation,
  rows,
  snapshotOf,
  transaction,
} from '@verity/persistence';
import { LOGGER, Logger, VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { JobName, JobProducer, QueueName } from '@verity/queues';
import {
  ExecutionStatus,
  executionFailure,
  OperationStatus,
  TerminalReason,
  VerificationMethod,
  isSettledOperation,
  isTerminalExecution,
} from '@verity/status-model';
import { DataSource, EntityManager } from 'typeorm';
import { needsApproval } from './operation-rules';
import { OutcomeService } from './outcome.service';

type TenantLoader = (tenantId: string) => Promise<TenantEntity | null>;
type ContextResult = Awaited<ReturnType<NonNullable<Connector['readContext']>>>;

/** A compare-and-set lost inside a transaction: roll it all back and look again. */
class LostRace extends Error {}

/**
 * Moves of one execution queued inside a transaction and written as one statement (`executionMoves`: each move its
 * own event) when flushed — which the caller does before writing any other event, so the log keeps its order.
 */
class MoveChain {
  private moves: { to: ExecutionStatus; eventData?: Record<string, unknown> }[] = [];

  constructor(
    private readonly transitions: TransitionService,
    private readonly tx: EntityManager,
    private readonly executionId: string,
    private at: ExecutionStatus,
  ) {}

  /** Where the execution will be once the queued moves are written. */
  get status(): ExecutionStatus {
    return this.moves.length ? this.moves[this.moves.length - 1].to : this.at;
  }

  add(to: ExecutionStatus, eventData?: Record<string, unknown>): void {
    this.moves.push({ to, eventData });
  }

  async flush(patch?: ExecutionPatch): Promise<ExecutionStatus> {
    if (this.moves.length === 0) return this.at;
    const result = await this.transitions.executionMoves(this.tx, {
      executionId: this.executionId,
      from: this.at,
      moves: this.moves,
      patch,
    });
    if (!result.won) throw new LostRace();
    this.at = this.status;
    this.moves = [];
    return this.at;
  }
}

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
    private readonly outcomes: OutcomeService,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  async advance(executionId: string): Promise<AdvanceOutcome> {
    let lost = 0;
    // The tenant (its approval policy and settings) is read once per job, not once per step.
    let tenantRow: Promise<TenantEntity | null> | undefined;
    const tenant: TenantLoader = (id) => (tenantRow ??= findTenant(this.db.manager, id));
    let execution: ExecutionEntity | null = null;
    let operations: OperationEntity[] | null = null;
    for (let step = 0; step < 20; step += 1) {
      // The execution row follows this job's own moves in memory and is read again only after a lost race; the
      // operations are read again after every step that changed something.
      if (!execution) {
        const found = await findExecutionWithOperations(this.db.manager, executionId);
        if (!found) return 'skipped: not found';
        ({ execution, operations } = found);
      }
      operations ??= await findOperations(this.db.manager, executionId);
      // Criteria are judged before every step, so the verdicts are current before the execution completes, and
      // again after it finished: a terminal execution's operations can still change (a reviewer's resolution).
      await this.outcomes.evaluate(execution, operations);
      if (isTerminalExecution(execution.status)) return step === 0 ? 'skipped: terminal' : 'done';
      const progressed = await this.step(execution, operations, tenant);
      // A lost CAS means someone else moved a row we read: look again rather than leave the execution where the
      // winner's (possibly older) view put it.
      if (progressed === 'lost') {
        lost += 1;
        execution = null;
        operations = null;
        continue;
      }
      if (!progressed) return 'done';
      operations = null;
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
      await this.cancelPrepared(this.db.manager, operations, 'execution_expired');
      const failure = executionFailure('deadline_exceeded', execution.status, new Date());
      return this.move(execution, E.EXPIRED, { reason: 'deadline passed', failure }, { failure: { ...failure } });
    }
    switch (execution.status) {
      case E.CREATED:
      case E.VALIDATING:
      case E.RESOLVING_CONTEXT:
      case E.PLANNING:
        return this.prepare(execution, operations, tenant);
      case E.VALIDATING_OUTPUT:
        return this.complete(execution);
      default:
        return this.run(execution, operations, tenant);
    }
  }

  /** A single move outside a transaction; the row in memory follows when it wins. */
  private async move(
    execution: ExecutionEntity,
    to: ExecutionStatus,
    eventData?: Record<string, unknown>,
    patch?: ExecutionPatch,
  ): Promise<boolean | 'lost'> {
    if (execution.status === to) return false;
    const result = await this.transitions.execution(this.db.manager, {
      executionId: execution.id,
      from: execution.status,
      to,
      eventData,
      patch,
    });
    if (!result.won) return 'lost';
    execution.status = to;
    return true;
  }

  /**
   * Moves that happen back to back share one transaction (commits are what this machine has least of), each with its
   * own event. The work returns the status it reached; the row in memory takes it only once committed. A lost
   * compare-and-set inside rolls everything back and the job looks again.
   */
  private async inTransaction(
    execution: ExecutionEntity,
    work: (tx: EntityManager) => Promise<ExecutionStatus>,
  ): Promise<boolean | 'lost'> {
    try {
      execution.status = await transaction(this.db, work);
      return true;
    } catch (error) {
      if (error instanceof LostRace) return 'lost';
      throw error;
    }
  }

  /**
   * created → validating → resolving_context → planning → running in one transaction (or → failed when the request
   * is invalid). The connectors' context reads are network calls, so they are made first, outside it; their results
   * are applied inside, while the execution is resolving_context, in the order the events tell.
   */
  private async prepare(
    execution: ExecutionEntity,
    operations: OperationEntity[],
    loadTenant: TenantLoader,
  ): Promise<boolean | 'lost'> {
    const from = execution.status;
    const problems = from === E.CREATED || from === E.VALIDATING ? this.problemsOf(operations) : [];
    if (problems.length > 0) return this.reject(execution, problems);
    const tenant = await loadTenant(execution.tenantId);
    const contexts = from === E.PLANNING ? new Map<string, ContextResult>() : await this.readContexts(operations);
    return this.inTransaction(execution, async (tx) => {
      // Rows are locked in the order every transition statement takes them (operations, then the execution).
      const locked = await lockExecution(tx, execution.id);
      if (locked?.status !== from) throw new LostRace();
      // The moves are written together, as one statement, just before any other event of this transaction.
      const chain = new MoveChain(this.transitions, tx, execution.id, from);
      if (chain.status === E.CREATED) chain.add(E.VALIDATING);
      if (chain.status === E.VALIDATING) chain.add(E.RESOLVING_CONTEXT);
      if (chain.status === E.RESOLVING_CONTEXT) {
        await this.applyContexts(tx, execution, locked.operations, contexts, tenant, async () => {
          await chain.flush();
        });
        chain.add(E.PLANNING);
      }
      if (locked.operations.some((op) => needsApproval(op, tenant?.settings))) {
        await chain.flush();
        await this.plan(tx, execution, tenant);
      }
      chain.add(E.RUNNING);
      return chain.flush();
    });
  }

  /** Re-checks what intake checked: rows can be written by older API versions or by hand. */
  private problemsOf(operations: OperationEntity[]): string[] {
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
    return problems;
  }

  private reject(execution: ExecutionEntity, problems: string[]): Promise<boolean | 'lost'> {
    const failure = executionFailure('invalid_request', E.VALIDATING, new Date(), problems.join('; ').slice(0, 2000));
    return this.inTransaction(execution, async (tx) => {
      const locked = await lockExecution(tx, execution.id);
      if (locked?.status !== execution.status) throw new LostRace();
      const chain = new MoveChain(this.transitions, tx, execution.id, execution.status);
      if (chain.status === E.CREATED) chain.add(E.VALIDATING);
      await chain.flush();
      await this.cancelPrepared(tx, locked.operations, 'execution_invalid');
      chain.add(E.FAILED, { failure });
      return chain.flush({ failure: failure as unknown as Record<string, unknown> });
    });
  }

  /** The context read of every PREPARED operation whose connector has one, by operation id. */
  private async readContexts(operations: OperationEntity[]): Promise<Map<string, ContextResult>> {
    const contexts = new Map<string, ContextResult>();
    for (const op of operations) {
      if (op.status !== S.PREPARED) continue;
      const connector = this.connectors.get(op.connector);
      if (!connector?.readContext) continue;
      contexts.set(
        op.id,
        await connector.readContext(
          connectorOperation(op),
          await connectorEnvironment(this.db.manager, op, this.config, this.connectors.get(op.connector)),
        ),
      );
    }
    return contexts;
  }

  /**
   * What the context reads found. The requested state already present → VERIFIED with no_change_required (Verity
   * does not claim it caused it). A mismatch with what the agent expected is a KNOWLEDGE_CONFLICT: irreversible →
   * held for a human; reversible → proceeds, conflict recorded.
   */
  private async applyContexts(
    tx: EntityManager,
    execution: ExecutionEntity,
    operations: OperationEntity[],
    contexts: Map<string, ContextResult>,
    tenant: TenantEntity | null,
    beforeEvent: () => Promise<void>,
  ): Promise<void> {
    for (const op of operations) {
      const context = contexts.get(op.id);
      if (op.status !== S.PREPARED || !context) continue;
      if (context.kind === 'unreachable') {
        await beforeEvent();
        await this.transitions.annotate(tx, {
          executionId: execution.id,
          operationId: op.id,
          type: 'context.unavailable',
          data: { evidence: context.evidence },
        });
        continue;
      }
      if (context.requestedStatePresent && op.verificationMethod === VerificationMethod.READ_AFTER_WRITE) {
        await beforeEvent();
        await this.transitions.operation(tx, {
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
        await beforeEvent();
        const recorded = await this.transitions.annotate(tx, {
          executionId: execution.id,
          operationId: op.id,
          type: 'knowledge.conflict',
          data: { conflicts, state: context.state, expected_state: op.expectedState, irreversible: op.irreversible },
        });
        if (op.irreversible) {
          await this.transitions.operation(tx, {
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
      await rows(tx, `UPDATE operations SET approval = coalesce(approval, '{}'::jsonb) || $2 WHERE id = $1`, [
        op.id,
        JSON.stringify({ baseline }),
      ]);
    }
  }

  /** Decide which operations need approval; a decision that arrived early is kept, not asked again. */
  private async plan(db: EntityManager, execution: ExecutionEntity, tenant: TenantEntity | null): Promise<void> {
    for (const op of await findOperations(db, execution.id)) {
      if (op.status !== S.PREPARED || !needsApproval(op, tenant?.settings)) continue;
      if (op.approval?.state === 'granted' || op.approval?.state === 'denied' || op.approval?.state === 'requested') {
        continue;
      }
      const approval: Approval = { ...(op.approval ?? {}), state: 'requested', requested_at: new Date().toISOString() };
      await this.transitions.annotate(db, {
        executionId: execution.id,
        operationId: op.id,
        whileStatus: S.PREPARED,
        whileApprovalOpen: true,
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
    // The tenant's approval policy matters only while something is still to be dispatched.
    const tenant = operations.some((op) => op.status === S.PREPARED) ? await loadTenant(execution.tenantId) : null;
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
            reason: TerminalReason.DENIED,
            eventData: { cause: 'approval_denied' },
          });
          changed ||= moved.won;
          continue;
        }
        if (op.approval?.state !== 'granted') {
          awaitingApproval += 1;
          if (op.approval?.state !== 'requested') await this.plan(this.db.manager, execution, tenant);
          continue;
        }
      }
      ready += 1;
      await this.enqueueDispatch(op);
    }
    if (changed) return true;
    const allSettled = operations.every((op) => isSettledOperation(op.status, op.verificationMethod));
    if (allSettled) return this.complete(execution);
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

  /**
   * Every operation settled: → validating_output → completed in one transaction. The criteria were judged before
   * this step (OutcomeService); the completion event repeats the verdicts it completed with.
   */
  private complete(execution: ExecutionEntity): Promise<boolean | 'lost'> {
    return this.inTransaction(execution, async (tx) => {
      const chain = new MoveChain(this.transitions, tx, execution.id, execution.status);
      if (chain.status !== E.VALIDATING_OUTPUT) chain.add(E.VALIDATING_OUTPUT);
      const criteria = (execution.criteriaResults ?? []).map((r) => ({ key: r.key, verdict: r.verdict }));
      chain.add(E.COMPLETED, { criteria, outcome: execution.outcome?.result ?? null });
      return chain.flush();
    });
  }

  /** I11: only never-sent operations are cancelled; anything already SENT keeps being reconciled. */
  private async cancelPrepared(db: EntityManager, operations: OperationEntity[], cause: string): Promise<void> {
    for (const op of operations) {
      if (op.status !== S.PREPARED) continue;
      await this.transitions.operation(db, {
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

  logSkip(executionId: string, outcome: AdvanceOutcome): void {
    if (outcome !== 'done') this.logger.debug({ executionId, outcome }, 'advance');
  }
}
