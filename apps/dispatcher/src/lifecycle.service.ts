import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import {
  Connector,
  ConnectorEnvironment,
  TenantConnectors,
  contextReadThrew,
  contextUnbound,
  unreachableRead,
} from '@verity/connectors';
import {
  Approval,
  ConnectorSettingsRecord,
  ExecutionEntity,
  ExecutionPatch,
  OperationEntity,
  ExecutionMovesInput,
  OperationToSend,
  TenantEntity,
  TransitionService,
  connectorOperation,
  findExecutionWithOperationsForWorker,
  findOperationsForWorker,
  lockExecutionForWorker,
  lockReadBackBindings,
  recordApprovalBaseline,
  recoveryObligation,
  snapshotOf,
  transaction,
  preparedFromStaleRead,
  refutedRetries,
  SecretUnreadableError,
  withinTransaction,
  type Queryable,
  type SettingsAsRead,
  type SendRefusal,
} from '@verity/persistence';
import { LOGGER, Logger, VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { JobName, JobProducer, jobId, preconditionReadJobId } from '@verity/queues';
import {
  CANCEL_CAUSE_OF_ENDED_EXECUTION,
  ExecutionStatus,
  executionFailure,
  OperationStatus,
  TerminalReason,
  DENIAL,
  judgeContext,
  mustReadPrecondition,
  preparePhases,
  preparedStep,
  sendsWithPreparation,
  preparesWithoutWrites,
  startedExecutionTarget,
  completesWhenVerified,
  isFinalOperation,
  isTerminalExecution,
  latestByKey,
  nextPreconditionRead,
  refutedRetryCancel,
} from '@verity/status-model';
import { DataSource, EntityManager } from 'typeorm';
import { approvalRuleMatchOf, needsApproval } from './operation-rules';
import { OutcomeService } from './outcome.service';

type ContextResult = Awaited<ReturnType<NonNullable<Connector['readContext']>>>;
type ReadEvidence = ContextResult['evidence'];

/** Which precondition of a send could not be read: the agent's expected_state, or an approval's baseline. */
export type Precondition = 'expected_state' | 'approval_baseline';

/** What a context read meant for one PREPARED operation. */
type ContextOutcome = 'moved' | 'unread' | 'agrees' | 'lost';

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
    /** The settings the moves were judged under, as read: each flush is written only while they are still stored. */
    private readonly whileSettingsAt?: SettingsAsRead[],
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
      whileSettingsAt: this.whileSettingsAt,
    });
    if (!result.won) throw new LostRace();
    this.at = this.status;
    this.moves = [];
    return this.at;
  }
}

/**
 * What one step of an advance did: nothing (false), something that calls for a fresh look (true), a lost race, or a
 * move of the execution alone — with the operations it read, still current as far as this job wrote.
 */
type StepResult = boolean | 'lost' | { operations: OperationEntity[] };

/**
 * Sends one ready operation in the calling job (SenderService.sendOperation under that job's lock), from the rows the
 * job holds when it has them (`held`); what it did, and the status it last wrote to the operation (null: none).
 * `thenExecution`: the execution's moves to write with the operation's VERIFIED, if the read at send concludes.
 */
export type SendNow = (
  operationId: string,
  held: OperationToSend | undefined,
  thenExecution?: ExecutionMovesInput,
  executionFirst?: ExecutionMovesInput,
) => Promise<{
  outcome: string;
  written: OperationStatus | null;
  refusals?: SendRefusal[];
  executionMoved?: true;
  executionMovedFirst?: true;
}>;

/**
 * A send made with a quiet preparation's moves that did not write them: refused by its guard or lost (nothing written),
 * or — rarely — a SENT written alone and nothing after it that the sender reports (the moves written alone then lose
 * their compare-and-set, the execution being past where they start). The caller writes the moves alone, unless
 * `staleRead` (refused for settings changed since the job read): then it reads everything again and prepares anew.
 */
class Unsent {
  constructor(readonly staleRead: boolean) {}
}

/** A won move that wrote only the execution row keeps the operations read for it; anything else is passed on. */
function executionOnly(moved: boolean | 'lost', operations: OperationEntity[] | null): StepResult {
  return moved === true && operations ? { operations } : moved;
}

/** → validating_output (unless there already) → completed; the completion event repeats the verdicts it completed with. */
function completionMoves(execution: ExecutionEntity, from = execution.status): ExecutionMovesInput['moves'] {
  const criteria = (execution.criteriaResults ?? []).map((r) => ({ key: r.key, verdict: r.verdict }));
  const completed = { to: E.COMPLETED, eventData: { criteria, outcome: execution.outcome?.result ?? null } };
  return from === E.VALIDATING_OUTPUT ? [completed] : [{ to: E.VALIDATING_OUTPUT }, completed];
}

/** What an advance job read with the execution: its tenant, and the tenant's settings for its operations' connectors. */
interface TenantRead {
  tenant: TenantEntity | null;
  /** Its approval policy as stored (the send guard compares it). */
  approvalPolicy: string | null;
  settings: Map<string, ConnectorSettingsRecord>;
  /**
   * How far the database's clock is ahead of this process' (negative: behind), measured at the read. The deadline is
   * a time on the database's clock — the send guard, the sweeper and the API judge it there — so the lifecycle does
   * too: a host whose clock runs ahead would expire an execution before its deadline, one behind would complete it
   * after.
   */
  clockOffsetMs: number;
}

export type AdvanceOutcome = 'done' | 'skipped: not found' | 'skipped: terminal' | 'skipped: lost race';

const E = ExecutionStatus;
const S = OperationStatus;

/**
 * Drives one execution through docs/contract.md §3. Only the dispatcher moves executions (a caller's cancel aside).
 * Every step re-reads the rows and moves by CAS, so duplicate or concurrent advance jobs are harmless.
 */
@Injectable()
export class LifecycleService {
  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly transitions: TransitionService,
    private readonly producer: JobProducer,
    private readonly connectors: TenantConnectors,
    private readonly outcomes: OutcomeService,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  /**
   * `sendNow`: given by an advance job (SEND_IN_ADVANCE), which then sends the operations it finds ready itself, under
   * its own job lock, instead of enqueueing dispatch jobs for them.
   */
  async advance(executionId: string, sendNow?: SendNow): Promise<AdvanceOutcome> {
    let lost = 0;
    // The tenant (its approval policy and settings) is read with the execution, not once per step.
    let tenant: TenantEntity | null = null;
    let approvalPolicy: string | null = null;
    let execution: ExecutionEntity | null = null;
    let operations: OperationEntity[] | null = null;
    // The tenant's settings for the connectors of the operations, read with them (for the context reads).
    let settings = new Map<string, ConnectorSettingsRecord>();
    let clockOffsetMs = 0;
    for (let step = 0; step < 20; step += 1) {
      // The execution row follows this job's own moves in memory and is read again only after a lost race; the
      // operations are read again after every step that changed something.
      if (!execution) {
        const found = await findExecutionWithOperationsForWorker(
          this.db.manager,
          executionId,
          this.connectors.secretsAccess(),
        );
        if (!found) return 'skipped: not found';
        ({ execution, operations, settings } = found);
        clockOffsetMs = found.databaseNow.getTime() - Date.now();
        tenant = found.tenant;
        approvalPolicy = found.approvalPolicy;
      }
      operations ??= await findOperationsForWorker(this.db.manager, executionId);
      // Criteria are judged before every step, so the verdicts are current before the execution completes, and
      // again after it finished: a terminal execution's operations can still change (a reviewer's resolution).
      await this.outcomes.evaluate(execution, operations, clockOffsetMs);
      if (isTerminalExecution(execution.status)) return step === 0 ? 'skipped: terminal' : 'done';
      const progressed = await this.step(
        execution,
        operations,
        { tenant, approvalPolicy, settings, clockOffsetMs },
        sendNow,
      );
      // A lost CAS means someone else moved a row we read: look again rather than leave the execution where the
      // winner's (possibly older) view put it.
      if (progressed === 'lost') {
        lost += 1;
        execution = null;
        operations = null;
        continue;
      }
      if (!progressed) return 'done';
      // Only the execution moved: the operations this step read are still what it wrote (no second read).
      operations = progressed === true ? null : progressed.operations;
    }
    return lost > 0 ? 'skipped: lost race' : 'done';
  }

  /**
   * One move; returns true when something changed and another look is worthwhile, or — when only the execution moved —
   * the operations as the step last read them, so the next look needs no second read.
   */
  private async step(
    execution: ExecutionEntity,
    operations: OperationEntity[],
    read: TenantRead,
    sendNow: SendNow | undefined,
  ): Promise<StepResult> {
    if (deadlinePassed(execution, read)) return this.expire(execution, read);
    switch (execution.status) {
      case E.CREATED:
      case E.VALIDATING:
      case E.RESOLVING_CONTEXT:
      case E.PLANNING:
        return this.prepare(execution, operations, read, sendNow);
      case E.VALIDATING_OUTPUT:
        return executionOnly(await this.complete(execution), operations);
      default:
        return this.run(execution, operations, read, sendNow);
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
    /** The work is one statement (atomic by itself): no BEGIN and COMMIT round trips around it. */
    single = false,
  ): Promise<boolean | 'lost'> {
    try {
      execution.status = single ? await work(this.db.manager) : await transaction(this.db, work);
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
    read: TenantRead,
    sendNow: SendNow | undefined,
  ): Promise<StepResult> {
    const { tenant, settings } = read;
    const from = execution.status;
    const phases = preparePhases(from);
    const problems = phases.validate ? this.problemsOf(operations) : [];
    if (problems.length > 0) return this.reject(execution, problems, read);
    const contexts = phases.readContexts
      ? await this.readContexts(operations, settings)
      : new Map<string, ContextResult>();
    // The context reads were made and judged under the settings this job read: the moves that commit that judgement are
    // written only while those settings are still stored (an admin who bound read-backs meanwhile would not count a
    // read made before); otherwise the job looks again and reads the contexts under the new ones.
    const judgedUnder = settingsOfContexts(operations, contexts, settings);
    const quiet = preparesWithoutWrites(
      operations.map((op) => ({
        prepared: op.status === S.PREPARED,
        irreversible: op.irreversible,
        expectedState: op.expectedState,
        verificationMethod: op.verificationMethod,
        approvalRequired: needsApproval(op, tenant?.settings, this.connectors),
        approvalRecorded: op.approval !== null,
        context: contexts.get(op.id),
      })),
    );
    if (quiet) {
      let unsent: Unsent | null = null;
      // The deadline is judged again after the context reads (network calls): passed, the moves are written alone
      // and the next step expires the execution, as it would have before the send.
      if (sendNow && !deadlinePassed(execution, read) && this.sendsWithPreparation(operations, read)) {
        const sent = await this.sendWithPreparation(execution, operations[0], phases.moves, read, sendNow);
        if (!(sent instanceof Unsent)) return sent;
        // Refused for settings changed since this job read them: the context reads were made and judged under those
        // settings (one the tenant has since bound may not count any more), so the moves out of resolving_context that
        // would commit that judgement are not written. Everything is read again and prepared anew, the context reads
        // too: what the history records of them is what the settings now stored say.
        if (sent.staleRead) return 'lost';
        unsent = sent;
      }
      // Nothing to write but the moves: one compare-and-set statement on the execution's status, no transaction and
      // no lock on the operations (anything that moved the execution meanwhile makes it lose, and the job looks again).
      const moved = await this.inTransaction(
        execution,
        async (db) => {
          const chain = new MoveChain(this.transitions, db, execution.id, from, judgedUnder);
          for (const to of phases.moves) chain.add(to);
          return chain.flush();
        },
        true,
      );
      // After a send that wrote nothing, the next step reads again, as it would have after that send (run, afterSends).
      if (unsent && moved === true) return true;
      return executionOnly(moved, operations);
    }
    // The operations as read under the lock, while nothing in this transaction has written to any of them.
    let untouched: OperationEntity[] | null = null;
    const moved = await this.inTransaction(execution, async (tx) => {
      // Before any row, the settings lock of each connector read for context, shared: the moves out of resolving_context
      // check those settings (whileSettingsAt) and a VERIFIED from an unbound context read checks the binding, each
      // under that lock. Taken there, after the rows below, it waited for a capped send that holds it and waits for a row.
      await lockReadBackBindings(
        tx,
        execution.tenantId,
        operations.filter((op) => contexts.has(op.id)).map((op) => op.connector),
      );
      // Rows are locked in the order every transition statement takes them (operations, then the execution).
      const locked = await lockExecutionForWorker(tx, execution.id);
      if (locked?.status !== from) throw new LostRace();
      untouched = locked.operations;
      // The moves are written together, as one statement, just before any other event of this transaction.
      const chain = new MoveChain(this.transitions, tx, execution.id, from, judgedUnder);
      for (const to of phases.moves) {
        if (chain.status === E.RESOLVING_CONTEXT) {
          const touched = await this.applyContexts(
            tx,
            execution,
            locked.operations,
            contexts,
            { tenant, clockOffsetMs: read.clockOffsetMs },
            async () => {
              await chain.flush();
            },
          );
          if (touched) untouched = null;
        }
        if (to === E.RUNNING && locked.operations.some((op) => needsApproval(op, tenant?.settings, this.connectors))) {
          await chain.flush();
          await this.plan(tx, execution, tenant);
          untouched = null;
        }
        chain.add(to);
      }
      return chain.flush();
    });
    return executionOnly(moved, untouched);
  }

  /** Whether this quiet preparation's moves go with its one send (the status model's sendsWithPreparation). */
  private sendsWithPreparation(operations: OperationEntity[], { tenant, settings }: TenantRead): boolean {
    // Settings whose secrets did not open cannot make the send: it reads them itself (and fails until the key is fixed).
    if (operations.some((op) => settings.get(op.connector)?.secretsUnopened)) return false;
    return sendsWithPreparation(
      operations.map((op) => ({
        status: op.status,
        dependsOn: op.dependsOn,
        approvalRequired: needsApproval(op, tenant?.settings, this.connectors),
        approvalState: op.approval?.state,
        preconditionOwed: op.nextCheckAt !== null,
        // Unknown settings (not read with the operations) count as capped: the send would read them itself.
        capped: (settings.get(op.connector)?.spendingCaps.length ?? 1) > 0,
      })),
    );
  }

  /**
   * A quiet preparation and its one send in one statement: the moves to running are written with the SENT
   * (`executionFirst`), and with its VERIFIED the completion when the read at send concludes — the happy path's
   * execution moves cost no statement of their own. When the send wrote nothing (refused, lost, the operation moved),
   * nothing of the preparation was written either: 'moves not written', and the caller writes them alone, as it would
   * have before the send (the history reads the same: a refused send writes nothing).
   */
  private async sendWithPreparation(
    execution: ExecutionEntity,
    op: OperationEntity,
    moves: ExecutionStatus[],
    { tenant, approvalPolicy, settings, clockOffsetMs }: TenantRead,
    sendNow: SendNow,
  ): Promise<StepResult | Unsent> {
    const first: ExecutionMovesInput = { from: execution.status, moves: moves.map((to) => ({ to })) };
    const completion = this.completionIfVerified(execution, E.RUNNING, [op], op);
    const held = {
      operation: op,
      executionDeadline: execution.deadlineAt,
      tenant,
      approvalPolicy,
      settings: settings.get(op.connector)!,
      clockOffsetMs,
    };
    const report = await sendNow(op.id, held, completion, first);
    if (!report.executionMovedFirst) {
      // Sent while another job of this execution had moved it on to running: read everything again. (Had the SENT been
      // written and then nothing more, the moves written alone lose their compare-and-set, with the same effect.)
      if (report.written !== null) return 'lost';
      return new Unsent(preparedFromStaleRead(report.refusals));
    }
    if (completion && report.executionMoved) {
      execution.status = completion.moves[completion.moves.length - 1].to;
      return false;
    }
    execution.status = E.RUNNING;
    return this.afterSends(execution, [op], [op], [report]);
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

  private reject(
    execution: ExecutionEntity,
    problems: string[],
    read: Pick<TenantRead, 'clockOffsetMs'>,
  ): Promise<boolean | 'lost'> {
    const failure = executionFailure(
      'invalid_request',
      E.VALIDATING,
      databaseNow(read),
      problems.join('; ').slice(0, 2000),
    );
    return this.inTransaction(execution, async (tx) => {
      const locked = await lockExecutionForWorker(tx, execution.id);
      if (locked?.status !== execution.status) throw new LostRace();
      const chain = new MoveChain(this.transitions, tx, execution.id, execution.status);
      if (chain.status === E.CREATED) chain.add(E.VALIDATING);
      await chain.flush();
      await this.cancelPrepared(tx, locked.operations, CANCEL_CAUSE_OF_ENDED_EXECUTION[E.FAILED]);
      chain.add(E.FAILED, { failure });
      return chain.flush({ failure: failure as unknown as Record<string, unknown> });
    });
  }

  /**
   * The context read of every PREPARED operation whose connector has one, by operation id; with the tenant's settings
   * this job read with the operations (read now for a connector they did not cover).
   */
  private async readContexts(
    operations: OperationEntity[],
    settings: Map<string, ConnectorSettingsRecord>,
  ): Promise<Map<string, ContextResult>> {
    const contexts = new Map<string, ContextResult>();
    for (const op of operations) {
      if (op.status !== S.PREPARED) continue;
      const connector = this.connectors.get(op.connector);
      if (!connector?.readContext) {
        // A precondition an irreversible operation must have read (I15) that its connector cannot read stays unread:
        // the operation waits, is read again on schedule, and is held for a person when the budget runs out.
        if (mustReadPrecondition(op)) contexts.set(op.id, unreachableRead(op.connector, 'no context read'));
        continue;
      }
      const known = settings.get(op.connector);
      contexts.set(
        op.id,
        await this.readContextOf(connector, op, async () => {
          if (!known) return this.connectors.environmentOf(op);
          // Read with the execution, a secret that did not open is said, not thrown: thrown here, it is this read's
          // failure (readContextOf), as it is when the settings are read for the read alone.
          if (known.secretsUnopened) throw known.secretsUnopened;
          return this.connectors.callEnvironment({
            allowHosts: known.allowHosts,
            secrets: known.secrets,
            readBackBinding: known.readBackBinding,
          });
        }),
      );
    }
    return contexts;
  }

  /**
   * The connector's context read of `op`; one that threw (a connector's fault on an answer it did not expect) is the
   * source unread, with its cause (contextReadThrew) — as a read-back that throws is for the reconciler — never a failed
   * job: every retry of it would throw the same way. So is a read whose environment cannot be built because the
   * tenant's secrets do not open with this SECRETS_KEY (`"context read error: SecretUnreadableError"`): it cannot be
   * made until the key is fixed, and is a failed read under the same rules. Anything else that fails building the
   * environment (the database, reading the settings) fails the job, to be retried as any other.
   */
  async readContextOf(
    connector: Connector,
    op: OperationEntity,
    environmentOf: () => ConnectorEnvironment | Promise<ConnectorEnvironment>,
  ): Promise<ContextResult> {
    if (!connector.readContext) return unreachableRead(op.connector, 'no context read');
    let environment: ConnectorEnvironment;
    try {
      environment = await environmentOf();
    } catch (error) {
      if (!(error instanceof SecretUnreadableError)) throw error;
      this.logger.error({ err: error, operationId: op.id }, 'context read not made: a secret does not open');
      return contextReadThrew(op.connector, error);
    }
    try {
      return await connector.readContext(connectorOperation(op), environment);
    } catch (error) {
      this.logger.error({ err: error, operationId: op.id }, 'context read threw');
      return contextReadThrew(op.connector, error);
    }
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
    read: Pick<TenantRead, 'tenant' | 'clockOffsetMs'>,
    beforeEvent: () => Promise<void>,
  ): Promise<boolean> {
    const { tenant } = read;
    // Whether any operation (or its history) was written: a context that agrees writes nothing.
    let touched = false;
    const beforeWrite = async () => {
      touched = true;
      await beforeEvent();
    };
    for (const op of operations) {
      const context = contexts.get(op.id);
      if (op.status !== S.PREPARED || !context) continue;
      const outcome = await this.applyContext(tx, execution, op, context, read, beforeWrite);
      // A write of the rows locked for this transaction refused by its statement's own condition (a VERIFIED from a
      // context read the tenant has bound since): nothing of this preparation is written, and the job looks again.
      if (outcome === 'lost') throw new LostRace();
      if (outcome !== 'agrees') continue;
      // Remember what the source looked like: an approval given now is stale if this changes before dispatch.
      // (A decision that arrived early is kept: the baseline is merged into it.)
      if (context.kind !== 'state' || (!needsApproval(op, tenant?.settings, this.connectors) && op.approval === null))
        continue;
      await recordApprovalBaseline(tx, op.id, context.state);
      touched = true;
    }
    return touched;
  }

  /**
   * One context read applied to one PREPARED operation (at resolving_context, or when an owed precondition read is
   * made again). The source unreachable: an irreversible operation with an expected_state is not sent blind (I15) —
   * it waits for another read or is held; anything else proceeds with the gap recorded.
   */
  private async applyContext(
    db: Queryable,
    execution: ExecutionEntity,
    op: OperationEntity,
    context: ContextResult,
    read: Pick<TenantRead, 'tenant' | 'clockOffsetMs'>,
    beforeEvent: () => Promise<void> = async () => undefined,
  ): Promise<ContextOutcome> {
    const { tenant } = read;
    const verdict = judgeContext(op, context);
    if (verdict.kind === 'agrees') return 'agrees';
    await beforeEvent();
    switch (verdict.kind) {
      case 'read-again':
        return this.preconditionUnread(db, {
          operation: op,
          deadline: execution.deadlineAt,
          evidence: context.evidence,
          precondition: 'expected_state',
          tenant,
          clockOffsetMs: read.clockOffsetMs,
        });
      case 'proceed-unread':
        await this.transitions.annotate(db, {
          executionId: execution.id,
          operationId: op.id,
          type: 'context.unavailable',
          data: { evidence: context.evidence, irreversible: op.irreversible, proceeds: true },
        });
        return 'agrees';
      case 'no-change-required': {
        const state = context.kind === 'state' ? context.state : {};
        if (verdict.expectationsMissed.length > 0) {
          // The agent's expected_state was wrong (it expected the effect not made yet): its knowledge is recorded as
          // in conflict with the source, before the operation closes without a change (only while it is PREPARED).
          const recorded = await this.transitions.annotate(db, {
            executionId: execution.id,
            operationId: op.id,
            whileStatus: S.PREPARED,
            type: 'knowledge.conflict',
            data: {
              conflicts: verdict.expectationsMissed,
              state,
              expected_state: op.expectedState,
              irreversible: op.irreversible,
              no_change_required: true,
            },
          });
          if (!recorded.won) return 'lost';
        }
        const moved = await this.transitions.operation(db, {
          operation: snapshotOf(op),
          to: S.VERIFIED,
          patch: {
            no_change_required: true,
            next_check_at: null,
            evidence: { method: 'context_read', no_change_required: true, ...context.evidence, state },
          },
          eventData: { no_change_required: true },
          // The read was made under the settings this job read before it; a context read that does not name this
          // effect verifies only while the tenant has not bound read-backs since.
          readBackUnbound: this.contextUnbound(op) || undefined,
        });
        return moved.won ? 'moved' : 'lost';
      }
      case 'conflict':
        return this.recordConflict(db, execution, op, context, verdict.conflicts, verdict.hold, read);
    }
  }

  /** Whether the operation's context read would not count under `read_back_binding: "bound"`. */
  private contextUnbound(op: OperationEntity): boolean {
    const connector = this.connectors.get(op.connector);
    return connector !== undefined && contextUnbound(connector, op.action, op.params);
  }

  /** A KNOWLEDGE_CONFLICT: always recorded; an irreversible operation is held for a human (MANUAL_REVIEW). */
  private async recordConflict(
    db: Queryable,
    execution: ExecutionEntity,
    op: OperationEntity,
    context: ContextResult,
    conflicts: string[],
    hold: boolean,
    read: Pick<TenantRead, 'tenant' | 'clockOffsetMs'>,
  ): Promise<ContextOutcome> {
    const state = context.kind === 'state' ? context.state : {};
    const recorded = await this.transitions.annotate(db, {
      executionId: execution.id,
      operationId: op.id,
      whileStatus: S.PREPARED,
      type: 'knowledge.conflict',
      data: { conflicts, state, expected_state: op.expectedState, irreversible: op.irreversible },
    });
    // No longer PREPARED (another job, a cancel): nothing recorded of a read that no longer applies; look again.
    if (!recorded.won) return 'lost';
    if (!hold) return 'agrees';
    const moved = await this.transitions.operation(db, {
      operation: snapshotOf(op),
      to: S.MANUAL_REVIEW,
      reason: TerminalReason.KNOWLEDGE_CONFLICT,
      patch: {
        next_check_at: null,
        evidence: { method: 'context_read', conflicts, ...context.evidence, state },
        obligation: this.obligation(TerminalReason.KNOWLEDGE_CONFLICT, false, read) as unknown as Record<
          string,
          unknown
        >,
      },
      eventData: { conflicts, conflict_event_id: recorded.eventId },
    });
    return moved.won ? 'moved' : 'lost';
  }

  /**
   * I15, no blind send: a precondition of an irreversible send could not be read. Each failed read is a
   * `context.unavailable` event. The operation waits in PREPARED (`next_check_at` = when it is read again,
   * `check_count` = failed reads so far; the SENT statement refuses while `next_check_at` is set) and a delayed
   * advance reads it again — or, once the budget is spent or the next read would come after the deadline, it is held:
   * PREPARED → MANUAL_REVIEW with SOURCE_UNREACHABLE and a recovery obligation. Also used by the sender when an
   * approval's baseline cannot be re-read at dispatch.
   */
  async preconditionUnread(
    db: Queryable,
    input: {
      operation: OperationEntity;
      deadline: Date;
      evidence: ReadEvidence;
      precondition: Precondition;
      tenant: TenantEntity | null;
      /** The database's clock less this process' (TenantRead.clockOffsetMs): the deadline is a time on the former. */
      clockOffsetMs: number;
    },
  ): Promise<'unread' | 'moved' | 'lost'> {
    const { operation: op, evidence, precondition } = input;
    const next = nextPreconditionRead(
      op.checkCount,
      {
        budget: this.config.PRECONDITION_READ_BUDGET,
        backoffMs: this.config.PRECONDITION_READ_BACKOFF_MS,
        backoffMaxMs: this.config.PRECONDITION_READ_BACKOFF_MAX_MS,
      },
      // By the database's clock, the deadline's: by a host clock that runs ahead, a read a second away looked like one
      // after the deadline, and the operation was held for a person at its first failed read.
      new Date(Date.now() + input.clockOffsetMs),
      input.deadline,
    );
    const data = {
      evidence,
      precondition,
      irreversible: op.irreversible,
      failed_reads: next.failedReads,
      budget: this.config.PRECONDITION_READ_BUDGET,
      ...(next.kind === 'retry' ? { next_read_at: next.at.toISOString() } : { held: next.why }),
    };
    const unavailable = (tx: Queryable) =>
      this.transitions.annotate(tx, {
        executionId: op.executionId,
        operationId: op.id,
        whileStatus: S.PREPARED,
        // Only over the count this read was made at: a redelivered or duplicate job whose read ends after a newer job
        // counted one must not write its older count back (the budget would stretch); it lost the race.
        whileCheckCount: op.checkCount,
        patch: next.kind === 'retry' ? { check_count: next.failedReads, next_check_at: next.at } : {},
        type: 'context.unavailable',
        data,
      });
    if (next.kind === 'retry') {
      const recorded = await unavailable(db);
      if (!recorded.won) return 'lost';
      // The delayed advance is only a trigger: if it is lost, the sweeper's advance of a quiet execution finds the
      // read owed (next_check_at) and schedules it again.
      await this.producer.tryEnqueue(
        JobName.ADVANCE_EXECUTION,
        { executionId: op.executionId },
        {
          jobId: preconditionReadJobId(op.executionId, next.at),
          delay: Math.max(0, next.at.getTime() - (Date.now() + input.clockOffsetMs)),
        },
      );
      return 'unread';
    }
    const detail =
      next.why === 'budget'
        ? `the ${precondition} could not be read in ${next.failedReads} attempts; not sent blind`
        : `the ${precondition} could not be read before the execution's deadline; not sent blind`;
    // The event that says the operation is held and the hold itself, in one transaction (the caller's, when it has one):
    // a process stopping between them left an event claiming a hold the row never showed.
    return heldOrLost(
      withinTransaction(db, async (tx) => {
        const recorded = await unavailable(tx);
        if (!recorded.won) throw new LostRace();
        const moved = await this.transitions.operation(tx, {
          operation: snapshotOf(op),
          to: S.MANUAL_REVIEW,
          reason: TerminalReason.SOURCE_UNREACHABLE,
          whileCheckCount: op.checkCount,
          patch: {
            check_count: next.failedReads,
            next_check_at: null,
            evidence: { method: 'context_read', precondition, detail, failed_reads: next.failedReads, ...evidence },
            obligation: this.obligation(TerminalReason.SOURCE_UNREACHABLE, false, input) as unknown as Record<
              string,
              unknown
            >,
          },
          eventData: { detail, precondition, failed_reads: next.failedReads, unavailable_event_id: recorded.eventId },
        });
        if (!moved.won) throw new LostRace();
        return 'moved' as const;
      }),
    );
  }

  /**
   * An operation that is otherwise ready but owes a precondition read: read it when due (else make sure the delayed
   * advance exists). Agrees → the owed read is cleared (`context.read`) and the operation may be dispatched.
   */
  private async readOwedPrecondition(
    execution: ExecutionEntity,
    op: OperationEntity,
    read: Pick<TenantRead, 'tenant' | 'clockOffsetMs'>,
  ): Promise<ContextOutcome> {
    const { tenant } = read;
    const due = op.nextCheckAt!;
    // When it is due, by the database's clock (next_check_at is written on it, see preconditionUnread).
    const untilDue = due.getTime() - (Date.now() + read.clockOffsetMs);
    // A delayed job may fire a hair early; re-adding it under its own (still active) id would be a no-op.
    if (untilDue > 50) {
      await this.producer.tryEnqueue(
        JobName.ADVANCE_EXECUTION,
        { executionId: execution.id },
        { jobId: preconditionReadJobId(execution.id, due), delay: untilDue },
      );
      return 'unread';
    }
    const connector = this.connectors.get(op.connector);
    const context: ContextResult = connector?.readContext
      ? await this.readContextOf(connector, op, () => this.connectors.environmentOf(op))
      : unreachableRead(op.connector, 'no context read');
    if (context.kind === 'unreachable') {
      // Whichever precondition put it here (the agent's expected_state, or the approval's baseline the sender could
      // not re-read), it is still unread: another failed read, counted against the same budget.
      return this.preconditionUnread(this.db.manager, {
        operation: op,
        deadline: execution.deadlineAt,
        evidence: context.evidence,
        precondition: mustReadPrecondition(op) ? 'expected_state' : 'approval_baseline',
        tenant,
        clockOffsetMs: read.clockOffsetMs,
      });
    }
    // An event and the move it explains (a knowledge.conflict and the hold, or the VERIFIED) in one transaction.
    const outcome = await heldOrLost(
      withinTransaction(this.db.manager, async (tx) => {
        // The binding's lock before the conflict's event locks the execution's row (see prepare).
        if (this.contextUnbound(op)) await lockReadBackBindings(tx, op.tenantId, [op.connector]);
        const applied = await this.applyContext(tx, execution, op, context, read);
        if (applied === 'lost') throw new LostRace();
        return applied;
      }),
    );
    if (outcome !== 'agrees') return outcome;
    const cleared = await this.transitions.annotate(this.db.manager, {
      executionId: execution.id,
      operationId: op.id,
      whileStatus: S.PREPARED,
      patch: { next_check_at: null },
      type: 'context.read',
      data: { evidence: context.evidence, state: context.state, after_failed_reads: op.checkCount },
    });
    if (!cleared.won) return 'lost';
    // The row as it now stands, for the send this job makes from it: with no read owed any more, the sender re-reads an
    // approval's baseline before sending (a held row still showing the owed read would skip that check).
    op.nextCheckAt = null;
    return 'agrees';
  }

  /**
   * Decide which operations need approval; a decision that arrived early is kept, not asked again. A retry whose chain
   * of retries holds a FAILED contradicted since is not asked for: it is never sent (the next step cancels it,
   * `preparedStep`), so no reviewer is shown it as awaiting approval.
   */
  private async plan(db: EntityManager, execution: ExecutionEntity, tenant: TenantEntity | null): Promise<void> {
    const operations = await findOperationsForWorker(db, execution.id);
    const refuted = await this.refutedOf(db, execution, operations);
    for (const op of operations) {
      if (op.status !== S.PREPARED || !needsApproval(op, tenant?.settings, this.connectors)) continue;
      if (op.approval?.state === 'granted' || op.approval?.state === 'denied' || op.approval?.state === 'requested') {
        continue;
      }
      if (refuted.has(op.id)) continue;
      // Its requested_at is stamped by the statement, from the database's clock (stampApprovalRequest).
      const approval: Approval = { ...(op.approval ?? {}), state: 'requested' };
      // The tenant rule that asks, and why (above its threshold, or in a currency it cannot be compared in).
      const match = approvalRuleMatchOf(op, tenant?.settings, this.connectors);
      await this.transitions.annotate(db, {
        executionId: execution.id,
        operationId: op.id,
        whileStatus: S.PREPARED,
        whileApprovalOpen: true,
        patch: { approval: approval as unknown as Record<string, unknown> },
        stampApprovalRequest: true,
        type: 'approval.requested',
        data: {
          policy: op.requiresApproval ? 'requires_approval' : 'tenant_policy',
          ...(match ? { rule: match.rule, reason: match.reason, detail: match.detail } : {}),
        },
      });
    }
  }

  /**
   * Of the PREPARED retries among `operations`, those whose chain of retries holds a FAILED contradicted since
   * (persistence `refutedRetries`): never sent. No statement for an execution that holds no PREPARED retry.
   */
  private refutedOf(db: Queryable, execution: ExecutionEntity, operations: OperationEntity[]): Promise<Set<string>> {
    const retries = operations.filter((op) => op.status === S.PREPARED && op.retryOf !== null).map((op) => op.id);
    return refutedRetries(db, execution.tenantId, retries);
  }

  /** running ⇄ waiting_for_tool ⇄ waiting_for_approval: dispatch what is ready, cancel what can never run. */
  private async run(
    execution: ExecutionEntity,
    operations: OperationEntity[],
    { tenant, approvalPolicy, settings, clockOffsetMs }: TenantRead,
    sendNow: SendNow | undefined,
  ): Promise<StepResult> {
    const latest = latestByKey(operations);
    let changed = false;
    let awaitingApproval = 0;
    const ready: OperationEntity[] = [];
    const refuted = await this.refutedOf(this.db.manager, execution, operations);
    for (const op of operations) {
      if (op.status !== S.PREPARED) continue;
      const next = preparedStep({
        dependencies: op.dependsOn.map((key) => latest.get(key)),
        approvalRequired: needsApproval(op, tenant?.settings, this.connectors),
        approvalState: op.approval?.state,
        preconditionOwed: op.nextCheckAt !== null,
        retryRefuted: refuted.has(op.id),
      });
      switch (next.kind) {
        case 'refuted': {
          // The FAILED it retries (or one up its chain) was contradicted since it was made: its send guard would refuse
          // it whatever a reviewer or a dependency did next. Cancelled now, by the compare-and-set on PREPARED: of this
          // and a concurrent approval or send, the send guard refuses the send, and a decision finds it CANCELLED.
          const moved = await this.transitions.operation(this.db.manager, {
            operation: snapshotOf(op),
            to: S.CANCELLED,
            actor: 'system',
            eventData: refutedRetryCancel(op.retryOf),
          });
          changed ||= moved.won;
          if (!moved.won) return 'lost';
          break;
        }
        case 'cancel': {
          const moved = await this.transitions.operation(this.db.manager, {
            operation: snapshotOf(op),
            to: S.CANCELLED,
            eventData: {
              cause: 'dependency_not_done',
              dependency: next.dependency?.key,
              dependency_status: next.dependency?.status,
              // Its VERIFIED stands, but the provider's rejection of its send came back since: no longer established.
              ...(next.dependency?.rejectedAt && {
                dependency_rejected_at: new Date(next.dependency.rejectedAt).toISOString(),
              }),
            },
          });
          changed ||= moved.won;
          break;
        }
        case 'deny': {
          const moved = await this.transitions.operation(this.db.manager, {
            operation: snapshotOf(op),
            ...DENIAL,
            eventData: { cause: 'approval_denied' },
          });
          changed ||= moved.won;
          break;
        }
        case 'await-approval':
          awaitingApproval += 1;
          if (next.request) await this.plan(this.db.manager, execution, tenant);
          break;
        case 'read-precondition': {
          const owed = await this.readOwedPrecondition(execution, op, { tenant, clockOffsetMs });
          if (owed === 'moved' || owed === 'lost') changed = true;
          else if (owed !== 'unread') ready.push(op);
          break;
        }
        case 'ready':
          ready.push(op);
          break;
        case 'wait':
          break;
      }
    }
    if (ready.length > 0) {
      // The SENT statement sends only while the execution is running (I15): move it there before handing out jobs.
      if ((await this.move(execution, E.RUNNING)) === 'lost') return 'lost';
      if (sendNow) {
        const completion =
          !changed && ready.length === 1
            ? this.completionIfVerified(execution, execution.status, operations, ready[0])
            : undefined;
        // Every ready operation is sent here, side by side. No dispatch job is made for them: an operation must have
        // one kind of sender, or a dispatch job finding it SENT by an advance job would take it for an orphan.
        const reports = await Promise.all(
          ready.map((op) => {
            // Settings whose secrets did not open are not handed on: the sender reads them itself (and fails until the
            // key is fixed) rather than build a call without the secrets the tenant set.
            const known = settings.get(op.connector);
            const held =
              known && !known.secretsUnopened
                ? {
                    operation: op,
                    executionDeadline: execution.deadlineAt,
                    tenant,
                    approvalPolicy,
                    settings: known,
                    clockOffsetMs,
                  }
                : undefined;
            return sendNow(op.id, held, completion);
          }),
        );
        // Settings read by this job went stale under a send (an admin changed an allowlist, a cap or the approval
        // policy): read everything again, as after a lost race, so the next try is prepared from what is stored now.
        if (reports.some((report) => preparedFromStaleRead(report.refusals))) return 'lost';
        if (completion && reports[0].executionMoved) {
          execution.status = completion.moves[completion.moves.length - 1].to;
          return false;
        }
        return this.afterSends(execution, operations, ready, reports);
      }
      if (this.config.SEND_IN_ADVANCE) {
        // Moving on outside an advance job (after a dispatch job's send): an advance job sends them.
        await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: execution.id });
        return false;
      }
      for (const op of ready) await this.enqueueDispatch(op);
    }
    if (changed) return true;
    const target = startedExecutionTarget({ operations, dispatched: ready.length, awaitingApproval });
    if (target === 'complete') return executionOnly(await this.complete(execution), operations);
    if (target === execution.status) return false;
    const moved = await this.move(execution, target);
    // A status change of the execution alone needs no second look: operations have not moved.
    return moved === 'lost' ? 'lost' : false;
  }

  /**
   * The moves that complete the execution, written with `op`'s VERIFIED if the read at send concludes — `op` being the
   * one operation this step sends (the status model's completesWhenVerified). undefined: the step after the send
   * decides, as always.
   */
  private completionIfVerified(
    execution: ExecutionEntity,
    from: ExecutionStatus,
    operations: OperationEntity[],
    op: OperationEntity,
  ): ExecutionMovesInput | undefined {
    const completes = completesWhenVerified({
      criteria: execution.criteria.length,
      operation: op,
      others: operations.filter((other) => other.id !== op.id),
    });
    return completes ? { from, moves: completionMoves(execution, from) } : undefined;
  }

  /**
   * What the next step needs after this job's sends: a fresh read of the operations — unless every one of them is now
   * final as this job knows it (what its sends wrote, or what it read final: nothing moves a final operation again) and
   * no criterion is judged from their rows (the evidence the sends wrote is not in memory). Then the operations as
   * known are current, and the execution completes without reading them again.
   */
  private afterSends(
    execution: ExecutionEntity,
    operations: OperationEntity[],
    sent: OperationEntity[],
    reports: { written: OperationStatus | null }[],
  ): StepResult {
    if (execution.criteria.length > 0) return true;
    const written = new Map(sent.map((op, i) => [op.id, reports[i].written]));
    const now = (op: OperationEntity) => (written.has(op.id) ? written.get(op.id)! : op.status);
    if (!operations.every((op) => now(op) !== null && isFinalOperation(now(op)!, op.verificationMethod))) return true;
    for (const op of sent) op.status = written.get(op.id)!;
    return { operations };
  }

  /**
   * One dispatch job per operation (`<op>.dispatch`), so enqueueing twice is harmless. A finished job (completed or
   * failed) for an operation that is still PREPARED never sent it — SENT is committed before any call — yet its id,
   * kept for an hour, would swallow this enqueue: an operation sent back for approval, or whose job failed before
   * the commit (a database error), would never be dispatched again. Such a job is removed and the operation
   * re-armed; the PREPARED → SENT compare-and-set, not the job id, is what guarantees a single send.
   */
  private async enqueueDispatch(op: OperationEntity): Promise<void> {
    await this.producer.enqueueOrRearm(
      JobName.DISPATCH_OPERATION,
      { operationId: op.id, executionId: op.executionId },
      jobId(JobName.DISPATCH_OPERATION, op.id),
    );
  }

  /**
   * Every operation settled: → validating_output → completed, both moves in one statement. The criteria were judged
   * before this step (OutcomeService); the completion event repeats the verdicts it completed with.
   */
  private complete(execution: ExecutionEntity): Promise<boolean | 'lost'> {
    return this.inTransaction(
      execution,
      async (db) => {
        const chain = new MoveChain(this.transitions, db, execution.id, execution.status);
        for (const move of completionMoves(execution)) chain.add(move.to, move.eventData);
        return chain.flush();
      },
      true,
    );
  }

  /**
   * Past the deadline: the PREPARED operations are cancelled, the execution expires, and then the operations held before
   * they were ever sent are cancelled too (no release of them can be carried out any more; their statement checks the
   * execution's end), in one transaction over the rows as locked, so none is left behind in the review queue.
   */
  private expire(execution: ExecutionEntity, read: Pick<TenantRead, 'clockOffsetMs'>): Promise<boolean | 'lost'> {
    return this.inTransaction(execution, async (tx) => {
      const locked = await lockExecutionForWorker(tx, execution.id);
      if (locked?.status !== execution.status) throw new LostRace();
      // Judged on the rows as locked: no operation is sent once the execution has expired.
      // The statement that writes the expiry replaces `at` with the instant it stamps the expiry's event with.
      const at = databaseNow(read);
      const failure = executionFailure('deadline_exceeded', execution.status, at, undefined, locked.operations);
      await this.cancelPrepared(tx, locked.operations, CANCEL_CAUSE_OF_ENDED_EXECUTION[E.EXPIRED]);
      const chain = new MoveChain(this.transitions, tx, execution.id, execution.status);
      chain.add(E.EXPIRED, { reason: 'deadline passed', failure });
      await chain.flush({ failure: { ...failure } });
      await this.transitions.cancelHeldOfEndedExecution(tx, locked.operations.map(snapshotOf), {
        cause: CANCEL_CAUSE_OF_ENDED_EXECUTION[E.EXPIRED],
      });
      return E.EXPIRED;
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

  /**
   * Due on the database's clock, the one the sweeper finds it overdue by (a host behind by more than the due time wrote
   * one overdue at once): `clockOffsetMs` is that clock less this process', measured at the tenant's read.
   */
  private obligation(
    reason: TerminalReason,
    everSent: boolean,
    { tenant, clockOffsetMs }: Pick<TenantRead, 'tenant' | 'clockOffsetMs'>,
  ) {
    return recoveryObligation({
      reason,
      everSent,
      settings: tenant?.settings,
      now: new Date(Date.now() + clockOffsetMs),
      dueInMs: this.config.OBLIGATION_DUE_MS,
    });
  }

  logSkip(executionId: string, outcome: AdvanceOutcome): void {
    if (outcome !== 'done') this.logger.debug({ executionId, outcome }, 'advance');
  }
}

/** Now by the database's clock, from this host's and the offset measured at the tenant's read: no round trip. */
function databaseNow(read: Pick<TenantRead, 'clockOffsetMs'>): Date {
  return new Date(Date.now() + read.clockOffsetMs);
}

/** The execution's deadline has passed by the database's clock (TenantRead.clockOffsetMs). */
function deadlinePassed(execution: ExecutionEntity, read: TenantRead): boolean {
  return execution.deadlineAt.getTime() <= Date.now() + read.clockOffsetMs;
}

/** What a transaction that throws LostRace when it loses a compare-and-set (rolling its writes back) came to. */
async function heldOrLost<T>(work: Promise<T>): Promise<T | 'lost'> {
  try {
    return await work;
  } catch (error) {
    if (error instanceof LostRace) return 'lost';
    throw error;
  }
}

/**
 * The settings each context read of `contexts` was made under, as this job read them with the operations (a connector
 * whose settings it did not read, or read without their version, is left out: its read asked for them itself).
 */
function settingsOfContexts(
  operations: OperationEntity[],
  contexts: Map<string, unknown>,
  settings: Map<string, ConnectorSettingsRecord>,
): SettingsAsRead[] {
  const connectors = new Set(operations.filter((op) => contexts.has(op.id)).map((op) => op.connector));
  return [...connectors].flatMap((connector) => {
    const version = settings.get(connector)?.version;
    return version === undefined ? [] : [{ connector, version }];
  });
}
