import { BeforeApplicationShutdown, Inject, Injectable, OnApplicationBootstrap } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import {
  TransitionService,
  claimDueObservations,
  executionsPastDeadline,
  heldOfEndedExecutions,
  msSinceLastSweep,
  operationsOwedChecks,
  operationsSentBefore,
  databaseClockOffsetMs,
  overdueUnescalatedObligations,
  pruneExpired,
  pruneSpendLedger,
  pruneWebhookDeliveries,
  pruneUnusableRecheckRequests,
  snapshotOf,
  staleExecutions,
  endedWithStaleOutcome,
  traceParentsOf,
  unsentReleases,
  withSweepLock,
} from '@verity/persistence';
import {
  BackgroundWork,
  LOGGER,
  Logger,
  RedisClient,
  VERITY_CONFIG,
  VerityConfig,
  inTraceOf,
  testPause,
  tracingOn,
} from '@verity/platform';
import { SchemaGate } from './schema-gate';
import {
  JobName,
  JobProducer,
  PRODUCER_REDIS,
  QueueName,
  jobId,
  releaseDispatchJobId,
  scheduledRecheckJobId,
} from '@verity/queues';
import {
  OperationStatus,
  OwedCheck,
  TerminalReason,
  VerificationMethodValue,
  cancelCauseOfEndedExecution,
  owedCheck,
} from '@verity/status-model';
import { DataSource } from 'typeorm';
import { hostname } from 'node:os';

/** The job that carries out each kind of owed check. */
const CHECK_JOB: Record<OwedCheck, JobName.VERIFY_OPERATION | JobName.RECONCILE_OPERATION | JobName.RECHECK_OPERATION> =
  {
    verify: JobName.VERIFY_OPERATION,
    reconcile: JobName.RECONCILE_OPERATION,
    recheck: JobName.RECHECK_OPERATION,
  };

export interface SweepReport {
  ran: boolean;
  expired: number;
  cancelledHeld: number;
  orphanedSent: number;
  reenqueuedExecutions: number;
  reenqueuedChecks: number;
  rearmedReleases: number;
  escalated: number;
  observations: number;
  prunedSpend: number;
  prunedIdempotency: number;
  prunedSweepLog: number;
  prunedWebhookDeliveries: number;
  prunedRecheckRequests: number;
}

/**
 * The repeatable sweep. Exactly one runs at a time however many reconcilers run (a Postgres advisory lock, held for
 * the sweep). Postgres is the truth and jobs are only triggers, so the sweep re-derives every owed job from rows.
 */
@Injectable()
export class SweeperService implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private fallbackTimer: NodeJS.Timeout | null = null;
  /** The fallback sweep under way, which the shutdown waits for (a sweep job is the sweep worker's to wait for). */
  private readonly fallback = new BackgroundWork();

  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly transitions: TransitionService,
    private readonly producer: JobProducer,
    private readonly schema: SchemaGate,
    @Inject(PRODUCER_REDIS) private readonly redis: RedisClient,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    this.traced = tracingOn(config);
  }

  /** With traces on, each job the sweep enqueues joins its execution's trace (not the sweep's); off, no lookup. */
  private readonly traced: boolean;

  /**
   * The sweep is the trigger that re-derives every other one, so it must not depend on Redis alone: BullMQ's schedule
   * has been seen to stop delivering the sweep job (a worker that kept "running" but took no job after a Redis Cluster
   * node came back empty). Each reconciler looks every few sweep intervals at when the last sweep of any reconciler
   * started (sweep_log, in Postgres); when none has for ten intervals it sweeps itself. The advisory lock still lets
   * only one sweep run at a time, so this costs nothing while the schedule works.
   */
  onApplicationBootstrap(): void {
    const every = Math.max(1_000, 5 * this.config.SWEEP_INTERVAL_MS);
    this.fallbackTimer = setInterval(() => void this.sweepIfOverdue(), every);
    this.fallbackTimer.unref();
  }

  /**
   * Before Postgres and Redis close (the last hooks): a fallback sweep under way finishes its pass, or the process's
   * forced exit ends it. Closed under it, the sweep failed half-way, its sweep_log row left unfinished.
   */
  async beforeApplicationShutdown(): Promise<void> {
    if (this.fallbackTimer) clearInterval(this.fallbackTimer);
    this.fallbackTimer = null;
    if (this.fallback.busy) this.logger.info('waiting for the fallback sweep under way to finish');
    await this.fallback.stop();
  }

  /** Sweeps in this process when no sweep has started for ten intervals (at least 5 s); whether it did. */
  sweepIfOverdue(): Promise<boolean> {
    // One at a time, and none once the process is stopping.
    if (this.fallback.busy) return Promise.resolve(false);
    return this.fallback.run(() => this.overdueSweep()) ?? Promise.resolve(false);
  }

  private async overdueSweep(): Promise<boolean> {
    try {
      if (!(await this.schema.open())) return false;
      const overdueAfterMs = Math.max(5_000, 10 * this.config.SWEEP_INTERVAL_MS);
      const since = await msSinceLastSweep(this.db.manager);
      if (since !== null && since < overdueAfterMs) return false;
      this.logger.warn(
        { msSinceLastSweep: since === null ? null : Math.round(since), overdueAfterMs },
        'no sweep has started for too long (the sweep schedule in Redis is not delivering): sweeping from this process',
      );
      await this.sweep();
      return true;
    } catch (error) {
      this.logger.warn({ err: error }, 'the overdue sweep failed; the next check tries again');
      return false;
    }
  }

  private traceParents(of: 'executions' | 'operations', ids: readonly string[]): Promise<Map<string, string>> {
    return this.traced ? traceParentsOf(this.db.manager, of, ids) : Promise.resolve(new Map());
  }

  async sweep(): Promise<SweepReport> {
    const report: SweepReport = {
      ran: false,
      expired: 0,
      cancelledHeld: 0,
      orphanedSent: 0,
      reenqueuedExecutions: 0,
      reenqueuedChecks: 0,
      rearmedReleases: 0,
      escalated: 0,
      observations: 0,
      prunedSpend: 0,
      prunedIdempotency: 0,
      prunedSweepLog: 0,
      prunedWebhookDeliveries: 0,
      prunedRecheckRequests: 0,
    };
    if (!(await this.schema.open())) return report;
    const ran = await withSweepLock(this.db, `${hostname()}:${process.pid}`, async () => {
      report.ran = true;
      report.expired = await this.expire();
      if (this.config.TEST_PAUSE_IN_SWEEP_MS > 0) {
        // Test-only kill point (refused in production): a sweep holding its lock, between two of its statements.
        await testPause(this.logger, this.config.TEST_PAUSE_IN_SWEEP_MS, 'paused in sweep');
      }
      // Before the releases and the escalation: a hold ended here is neither re-armed nor escalated in this pass.
      report.cancelledHeld = await this.heldOfEndedExecutions();
      report.orphanedSent = await this.orphanedSent();
      report.reenqueuedExecutions = await this.staleExecutions();
      report.reenqueuedChecks = await this.owedChecks();
      report.rearmedReleases = await this.unsentReleases();
      report.escalated = await this.escalate();
      report.observations = await this.observations();
      report.prunedSpend = await pruneSpendLedger(this.db.manager, this.config.SWEEP_BATCH);
      const pruned = await pruneExpired(this.db.manager, this.config.SWEEP_BATCH);
      report.prunedIdempotency = pruned.idempotency;
      report.prunedSweepLog = pruned.sweepLog;
      report.prunedWebhookDeliveries = await pruneWebhookDeliveries(
        this.db.manager,
        this.config.WEBHOOK_DELIVERY_RETENTION_MS,
        this.config.SWEEP_BATCH,
      );
      report.prunedRecheckRequests = await pruneUnusableRecheckRequests(this.db.manager, this.config.SWEEP_BATCH);
      return report;
    });
    if (!ran) return report;
    if (report.expired + report.cancelledHeld + report.orphanedSent + report.rearmedReleases + report.escalated > 0)
      this.logger.info({ report }, 'sweep');
    return report;
  }

  /** Executions past their deadline: the dispatcher (owner of the lifecycle) expires them on this advance. */
  private async expire(): Promise<number> {
    const due = await executionsPastDeadline(this.db.manager, this.config.SWEEP_BATCH);
    const traces = await this.traceParents('executions', due);
    for (const id of due) {
      await inTraceOf(traces.get(id), () => this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: id }));
    }
    return due.length;
  }

  /**
   * A held operation that was never sent can no longer be released once its execution has ended unreleasable
   * (cancelled, expired, failed). The cancel and the expiry end such holds in their own transaction; one left behind —
   * rows from before they did, or an execution ended by a path that does not — would stay in the review queue,
   * escalating and keeping the execution's stream open, for a decision with only one answer. Each is ended CANCELLED
   * by the statement the cancel uses (its own compare-and-set, checking the execution's end in the database), so a
   * reviewer deciding it at the same moment either wins or finds it cancelled. Held operations that were ever sent are
   * not read: their effect may exist (I11). Their executions get an advance job, which records the criteria's verdicts
   * again (a terminal execution's operations can still change).
   */
  private async heldOfEndedExecutions(): Promise<number> {
    const held = await heldOfEndedExecutions(this.db.manager, this.config.SWEEP_BATCH);
    if (held.length === 0) return 0;
    let cancelled = 0;
    const executions = new Set<string>();
    for (const { operation, executionStatus } of held) {
      const cause = cancelCauseOfEndedExecution(executionStatus);
      // The statement reads only ended executions, which never move again; this only keeps the types honest.
      if (!cause) continue;
      const won = await this.transitions.cancelHeldOfEndedExecution(this.db.manager, [snapshotOf(operation)], {
        cause,
        detail: 'its execution had already ended; cancelled by the sweep',
      });
      if (won === 0) continue;
      cancelled += 1;
      executions.add(operation.executionId);
      this.logger.info(
        { operationId: operation.id, executionId: operation.executionId, executionStatus, cause },
        'a held, never-sent operation of an ended execution: cancelled',
      );
    }
    const traces = await this.traceParents('executions', [...executions]);
    for (const id of executions) {
      await inTraceOf(traces.get(id), () => this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: id }));
    }
    return cancelled;
  }

  /**
   * SENT with no job to finish it — its worker died, or its job failed after the call (the write of the answer) —
   * older than the lock window and no live dispatch job → UNKNOWN (never re-sent).
   * "Live" means an active job whose lock is still held: a SIGKILLed or frozen worker stops renewing its lock, while
   * BullMQ keeps listing the job as active until some worker's stalled check runs (every 30 s by default).
   */
  private async orphanedSent(): Promise<number> {
    const candidates = await operationsSentBefore(
      this.db.manager,
      this.config.DISPATCH_LOCK_MS + this.config.SEND_GRACE_MS,
      this.config.SWEEP_BATCH,
    );
    if (candidates.length === 0) return 0;
    const live = await this.liveDispatches();
    // Without Redis nothing can tell a slow worker from a dead one; SENT is an honest "wait" until it is back.
    if (!live) return 0;
    let moved = 0;
    const traces = await this.traceParents(
      'executions',
      candidates.map((op) => op.executionId),
    );
    for (const op of candidates) {
      // A live dispatch job of the operation, or a live advance job of its execution (which sends in-process).
      if (live.has(op.id) || live.has(op.executionId)) continue;
      const result = await this.transitions.operation(this.db.manager, {
        operation: snapshotOf(op),
        to: OperationStatus.UNKNOWN,
        reason: TerminalReason.CONNECTOR_ERROR,
        eventData: {
          // What is known, no more: no job finishes it. Its worker may have stopped, or be running with a job that
          // failed after the call (the answer's write refused): from here the two look alike.
          detail:
            'left SENT with no live job: its worker stopped, or its job ended before recording what the connector answered; the send may or may not have happened',
          job_state: 'no live job',
        },
      });
      if (!result.won) continue;
      moved += 1;
      await inTraceOf(traces.get(op.executionId), async () => {
        await this.producer.tryEnqueue(
          JobName.RECONCILE_OPERATION,
          { operationId: op.id, executionId: op.executionId },
          { jobId: jobId(JobName.RECONCILE_OPERATION, op.id, 0) },
        );
        await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: op.executionId });
      });
    }
    return moved;
  }

  /**
   * Who may still be sending: the operation ids of dispatch jobs, and the execution ids of advance jobs (which send a
   * ready operation themselves, SEND_IN_ADVANCE), that are active and still locked by a running worker; null if Redis
   * cannot say. Both queues' workers hold their locks for DISPATCH_LOCK_MS and renew them while alive.
   */
  private liveDispatches(): Promise<Set<string> | null> {
    return this.unlessRedisFails(
      'cannot list live dispatch jobs; orphaned SENT operations wait for the next sweep',
      async () => {
        const live = new Set<string>();
        const owners = [
          { queueName: QueueName.DISPATCH, idField: 'operationId' },
          { queueName: QueueName.EXECUTIONS, idField: 'executionId' },
        ] as const;
        for (const { queueName, idField } of owners) {
          // On every shard: an operation's jobs are on its execution's.
          for (const queue of await this.producer.connectedQueues(queueName)) {
            const active = await queue.getActive(0, 4 * this.config.SWEEP_BATCH);
            for (const job of active) {
              const id = (job?.data as Record<string, unknown> | undefined)?.[idField];
              if (!job?.id || typeof id !== 'string') continue;
              if (await this.redis.exists(`${queue.toKey(job.id)}:lock`)) live.add(id);
            }
          }
        }
        return live;
      },
    );
  }

  /**
   * A pass that needs Redis to answer gives up for this sweep when it cannot, saying so: what it owes is on rows in
   * Postgres, which the next sweep reads again. Null then.
   */
  private async unlessRedisFails<T>(warning: string, work: () => Promise<T>): Promise<T | null> {
    try {
      return await work();
    } catch (error) {
      this.logger.warn({ err: error }, warning);
      return null;
    }
  }

  /** I7: accepted work whose job was lost (Redis down at intake, a crash between commit and enqueue...). */
  private async staleExecutions(): Promise<number> {
    const stale = [
      ...(await staleExecutions(this.db.manager, this.config.STALE_EXECUTION_MS, this.config.SWEEP_BATCH)),
      // An ended execution's outcome is judged again when an operation of it settles later (a reviewer's resolution
      // enqueues the advance); one whose advance was lost (Redis down or emptied) would keep a pending verdict forever.
      ...(await endedWithStaleOutcome(this.db.manager, this.config.STALE_EXECUTION_MS, this.config.SWEEP_BATCH)),
    ];
    const traces = await this.traceParents('executions', stale);
    for (const id of stale) {
      await inTraceOf(traces.get(id), () => this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: id }));
    }
    return stale.length;
  }

  /**
   * Verifications, reconciliations and re-checks of held operations that are overdue (their delayed job was lost):
   * enqueue them again. A hold is re-checked only while its next_check_at is set: the row, not Redis, says it is owed.
   * A re-check is armed as the job of its hold's chain for that due time (scheduledRecheckJobId, carrying `dueAt`), so
   * it reads and writes only while the row still names that time: with no due time and an id of its own it ran beside
   * the chain's job when that was only late, and wrote out of turn once a read had re-dated the hold — a second chain.
   * One of that id still waiting or delayed is left to run; one that failed (its attempts spent) is armed again.
   */
  private async owedChecks(): Promise<number> {
    const owed = await operationsOwedChecks(this.db.manager, this.config.STALE_EXECUTION_MS, this.config.SWEEP_BATCH);
    const sweepStamp = Math.floor(Date.now() / Math.max(1000, this.config.STALE_EXECUTION_MS));
    const traces = await this.traceParents(
      'operations',
      owed.map((op) => op.id),
    );
    for (const op of owed) {
      const check = owedCheck({
        status: op.status,
        verificationMethod: op.verification_method as VerificationMethodValue,
        recheckScheduled: op.recheck_scheduled,
      });
      if (!check) continue;
      const name = CHECK_JOB[check];
      const data = { operationId: op.id, executionId: op.execution_id };
      const dueAt = op.next_check_at;
      await inTraceOf(traces.get(op.id), () =>
        name === JobName.RECHECK_OPERATION && dueAt
          ? this.producer.tryEnqueueOrRearm(
              name,
              { ...data, dueAt: dueAt.toISOString() },
              scheduledRecheckJobId(op.id, dueAt),
            )
          : this.producer.tryEnqueue(name, data, { jobId: jobId(name, op.id, `sweep${sweepStamp}`) }),
      );
    }
    return owed.length;
  }

  /**
   * A reviewer's release of a held, never-sent operation is recorded on the row and carried out by one dispatch job,
   * which the API enqueues once. When that job is lost (Redis emptied, its dispatcher killed before SENT: a dispatch job
   * is never re-run) or finished without sending (refused twice for settings changed under it), nothing else would ever
   * send the operation, and the recorded resolution refuses every other: so the job is armed again under the API's id.
   * A job of that id still waiting, delayed or active is left to run (a dead worker's active job fails at the next
   * stalled check, and the next sweep re-arms it). The SENT statement's release guard, not the job id, keeps a
   * duplicate or late job from sending twice, and a release it refuses for good (execution ended, dependency not done)
   * is withdrawn, so it is not re-armed forever.
   */
  private async unsentReleases(): Promise<number> {
    const owed = await unsentReleases(this.db.manager, this.config.STALE_EXECUTION_MS, this.config.SWEEP_BATCH);
    if (owed.length === 0) return 0;
    const traces = await this.traceParents(
      'operations',
      owed.map((op) => op.id),
    );
    let rearmed = 0;
    // Without Redis the releases stay recorded in Postgres, and those re-armed so far are counted.
    await this.unlessRedisFails(
      'cannot re-arm the dispatch jobs of recorded releases; the next sweep tries again',
      async () => {
        for (const { id, execution_id: executionId } of owed) {
          const added = await inTraceOf(traces.get(id), () =>
            this.producer.enqueueOrRearm(
              JobName.DISPATCH_OPERATION,
              { operationId: id, executionId },
              releaseDispatchJobId(id),
            ),
          );
          if (!added) continue;
          rearmed += 1;
          this.logger.info({ operationId: id, executionId }, 'a recorded release had no dispatch job: armed again');
        }
      },
    );
    return rearmed;
  }

  /**
   * Observation after VERIFIED: claim the operations whose next read is due (a bounded batch, recent operations only)
   * and hand each to the verify queue, so slow reads never hold the sweep lock. Older ones stop being observed.
   */
  private async observations(): Promise<number> {
    if (this.config.OBSERVE_BATCH === 0) return 0;
    const due = await claimDueObservations(this.db.manager, {
      windowMs: this.config.OBSERVE_WINDOW_MS,
      limit: this.config.OBSERVE_BATCH,
      intervalMs: this.config.OBSERVE_INTERVAL_MS,
      retireBatch: this.config.SWEEP_BATCH,
    });
    const stamp = Date.now();
    const traces = await this.traceParents(
      'operations',
      due.map((op) => op.id),
    );
    for (const { id, execution_id: executionId } of due) {
      await inTraceOf(traces.get(id), () =>
        this.producer.tryEnqueue(
          JobName.OBSERVE_OPERATION,
          { operationId: id, executionId },
          { jobId: jobId(JobName.OBSERVE_OPERATION, id, stamp) },
        ),
      );
    }
    return due.length;
  }

  /** Overdue recovery obligations: an event, once, and a metric (verity_overdue_obligations). */
  private async escalate(): Promise<number> {
    const overdue = await overdueUnescalatedObligations(this.db.manager, this.config.SWEEP_BATCH);
    if (overdue.length === 0) return 0;
    // `escalated_at` is shown beside the due time and the events, all on the database's clock: this host's may be off.
    const clockOffsetMs = await databaseClockOffsetMs(this.db.manager);
    let escalated = 0;
    for (const op of overdue) {
      if (!op.obligation) continue;
      const at = new Date(Date.now() + clockOffsetMs).toISOString();
      const result = await this.transitions.annotate(this.db.manager, {
        executionId: op.executionId,
        operationId: op.id,
        whileStatus: OperationStatus.MANUAL_REVIEW,
        // Merged, not replaced: a resolution recorded since this read must not be erased (I13).
        merge: { obligation: { escalated_at: at } },
        // A reviewer who re-dated it meanwhile ("still unknown") made it not overdue: no escalation then.
        whileObligationDueAt: op.obligation.due_at,
        // Once: the sweep lock keeps two sweeps apart only while its connection lives (I2, one event per fact).
        whileUnescalated: true,
        // Not once a reviewer decided (a release the dispatcher has yet to carry out, too): the obligation was met.
        whileUnresolved: true,
        type: 'obligation.escalated',
        data: { to: op.obligation.escalation_target, owner: op.obligation.owner, due_at: op.obligation.due_at },
      });
      if (result.won) escalated += 1;
    }
    return escalated;
  }
}
