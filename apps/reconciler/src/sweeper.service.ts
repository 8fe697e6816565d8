import { InjectQueue } from '@nestjs/bullmq';
import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import {
  OperationEntity,
  TransitionService,
  pruneExpired,
  pruneSpendLedger,
  rows,
  snapshotOf,
} from '@verity/persistence';
import { LOGGER, Logger, VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { JobName, JobProducer, PRODUCER_REDIS, QueueName, jobId } from '@verity/queues';
import { OperationStatus, TerminalReason } from '@verity/status-model';
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { DataSource } from 'typeorm';
import { hostname } from 'node:os';

const SWEEP_LOCK = 727_002;
const BATCH = 500;

export interface SweepReport {
  ran: boolean;
  expired: number;
  orphanedSent: number;
  reenqueuedExecutions: number;
  reenqueuedChecks: number;
  escalated: number;
  observations: number;
  prunedSpend: number;
  prunedIdempotency: number;
  prunedSweepLog: number;
}

/**
 * The repeatable sweep. Exactly one runs at a time however many reconcilers run (a Postgres advisory lock, held for
 * the sweep). Postgres is the truth and jobs are only triggers, so the sweep re-derives every owed job from rows.
 */
@Injectable()
export class SweeperService {
  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly transitions: TransitionService,
    private readonly producer: JobProducer,
    @InjectQueue(QueueName.DISPATCH) private readonly dispatchQueue: Queue,
    @Inject(PRODUCER_REDIS) private readonly redis: Redis,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  async sweep(): Promise<SweepReport> {
    const report: SweepReport = {
      ran: false,
      expired: 0,
      orphanedSent: 0,
      reenqueuedExecutions: 0,
      reenqueuedChecks: 0,
      escalated: 0,
      observations: 0,
      prunedSpend: 0,
      prunedIdempotency: 0,
      prunedSweepLog: 0,
    };
    const runner = this.db.createQueryRunner();
    await runner.connect();
    try {
      const [{ locked }] = (await runner.query(`SELECT pg_try_advisory_lock($1) AS locked`, [SWEEP_LOCK])) as {
        locked: boolean;
      }[];
      if (!locked) return report;
      try {
        report.ran = true;
        const [{ id: logId }] = (await runner.query(`INSERT INTO sweep_log (worker) VALUES ($1) RETURNING id`, [
          `${hostname()}:${process.pid}`,
        ])) as { id: string }[];
        report.expired = await this.expire();
        report.orphanedSent = await this.orphanedSent();
        report.reenqueuedExecutions = await this.staleExecutions();
        report.reenqueuedChecks = await this.owedChecks();
        report.escalated = await this.escalate();
        report.observations = await this.observations();
        report.prunedSpend = await pruneSpendLedger(this.db.manager, BATCH);
        const pruned = await pruneExpired(this.db.manager, BATCH);
        report.prunedIdempotency = pruned.idempotency;
        report.prunedSweepLog = pruned.sweepLog;
        await runner.query(`UPDATE sweep_log SET finished_at = clock_timestamp(), report = $2 WHERE id = $1`, [
          logId,
          JSON.stringify(report),
        ]);
      } finally {
        await runner.query(`SELECT pg_advisory_unlock($1)`, [SWEEP_LOCK]);
      }
    } finally {
      await runner.release();
    }
    if (report.expired + report.orphanedSent + report.escalated > 0) this.logger.info({ report }, 'sweep');
    return report;
  }

  /** Executions past their deadline: the dispatcher (owner of the lifecycle) expires them on this advance. */
  private async expire(): Promise<number> {
    const due = await rows<{ id: string }>(
      this.db.manager,
      `SELECT id FROM executions WHERE status NOT IN ('completed','failed','cancelled','expired') AND deadline_at <= now()
       ORDER BY deadline_at LIMIT ${BATCH}`,
    );
    for (const { id } of due) await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: id });
    return due.length;
  }

  /**
   * SENT by a worker that died: older than the lock window and no live dispatch job → UNKNOWN (never re-sent).
   * "Live" means an active job whose lock is still held: a SIGKILLed or frozen worker stops renewing its lock, while
   * BullMQ keeps listing the job as active until some worker's stalled check runs (every 30 s by default).
   */
  private async orphanedSent(): Promise<number> {
    const candidates = await this.db
      .getRepository(OperationEntity)
      .createQueryBuilder('o')
      .where(`o.status = 'SENT' AND o.sent_at < now() - make_interval(secs => :ms / 1000.0)`, {
        ms: this.config.DISPATCH_LOCK_MS + this.config.SEND_GRACE_MS,
      })
      .limit(BATCH)
      .getMany();
    if (candidates.length === 0) return 0;
    const live = await this.liveDispatches();
    // Without Redis nothing can tell a slow worker from a dead one; SENT is an honest "wait" until it is back.
    if (!live) return 0;
    let moved = 0;
    for (const op of candidates) {
      if (live.has(op.id)) continue;
      const result = await this.transitions.operation(this.db.manager, {
        operation: snapshotOf(op),
        to: OperationStatus.UNKNOWN,
        reason: TerminalReason.CONNECTOR_ERROR,
        eventData: {
          detail: 'left SENT by a worker that stopped; the send may or may not have happened',
          job_state: 'no live job',
        },
      });
      if (!result.won) continue;
      moved += 1;
      await this.producer.tryEnqueue(
        JobName.RECONCILE_OPERATION,
        { operationId: op.id },
        { jobId: `${op.id}.reconcile.0` },
      );
      await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: op.executionId });
    }
    return moved;
  }

  /** Operation ids of dispatch jobs that are active and still locked by a running worker; null if Redis cannot say. */
  private async liveDispatches(): Promise<Set<string> | null> {
    try {
      const live = new Set<string>();
      const active = await this.dispatchQueue.getActive(0, 4 * BATCH);
      for (const job of active) {
        const operationId = (job?.data as { operationId?: unknown } | undefined)?.operationId;
        if (!job?.id || typeof operationId !== 'string') continue;
        if (await this.redis.exists(`${this.dispatchQueue.toKey(job.id)}:lock`)) live.add(operationId);
      }
      return live;
    } catch (error) {
      this.logger.warn(
        { err: error },
        'cannot list live dispatch jobs; orphaned SENT operations wait for the next sweep',
      );
      return null;
    }
  }

  /** I7: accepted work whose job was lost (Redis down at intake, a crash between commit and enqueue...). */
  private async staleExecutions(): Promise<number> {
    const stale = await rows<{ id: string }>(
      this.db.manager,
      `SELECT id FROM executions
       WHERE status NOT IN ('completed','failed','cancelled','expired')
         AND updated_at < now() - make_interval(secs => $1 / 1000.0)
       ORDER BY updated_at LIMIT ${BATCH}`,
      [this.config.STALE_EXECUTION_MS],
    );
    for (const { id } of stale) await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: id });
    return stale.length;
  }

  /**
   * Verifications, reconciliations and re-checks of held operations that are overdue (their delayed job was lost):
   * enqueue them again. A hold is re-checked only while its next_check_at is set: the row, not Redis, says it is owed.
   */
  private async owedChecks(): Promise<number> {
    const owed = await rows<{ id: string; status: string; check_count: number }>(
      this.db.manager,
      `SELECT id, status, check_count FROM operations
       WHERE ((status = 'ACKNOWLEDGED' AND verification_method = 'read_after_write') OR status IN ('UNKNOWN', 'RECONCILING')
              OR (status = 'MANUAL_REVIEW' AND next_check_at IS NOT NULL))
         AND coalesce(next_check_at, updated_at) < now() - make_interval(secs => $1 / 1000.0)
       ORDER BY updated_at LIMIT ${BATCH}`,
      [this.config.STALE_EXECUTION_MS],
    );
    const sweepStamp = Math.floor(Date.now() / Math.max(1000, this.config.STALE_EXECUTION_MS));
    for (const op of owed) {
      const name =
        op.status === 'ACKNOWLEDGED'
          ? JobName.VERIFY_OPERATION
          : op.status === 'MANUAL_REVIEW'
            ? JobName.RECHECK_OPERATION
            : JobName.RECONCILE_OPERATION;
      await this.producer.tryEnqueue(name, { operationId: op.id }, { jobId: jobId(name, op.id, `sweep${sweepStamp}`) });
    }
    return owed.length;
  }

  /**
   * Observation after VERIFIED: claim the operations whose next read is due (a bounded batch, recent operations only)
   * and hand each to the verify queue, so slow reads never hold the sweep lock. Older ones stop being observed.
   */
  private async observations(): Promise<number> {
    if (this.config.OBSERVE_BATCH === 0) return 0;
    await this.db.query(
      `UPDATE operations SET next_check_at = NULL WHERE id IN (
         SELECT id FROM operations
         WHERE status = 'VERIFIED' AND next_check_at IS NOT NULL
           AND created_at <= now() - make_interval(secs => $1 / 1000.0)
         LIMIT ${BATCH})`,
      [this.config.OBSERVE_WINDOW_MS],
    );
    const due = await rows<{ id: string }>(
      this.db.manager,
      `WITH due AS (
         SELECT id FROM operations
         WHERE status = 'VERIFIED' AND next_check_at IS NOT NULL AND next_check_at <= now()
           AND created_at > now() - make_interval(secs => $1 / 1000.0)
         ORDER BY next_check_at LIMIT $2 FOR UPDATE SKIP LOCKED
       )
       UPDATE operations o SET next_check_at = now() + make_interval(secs => $3 / 1000.0)
       FROM due WHERE o.id = due.id RETURNING o.id`,
      [this.config.OBSERVE_WINDOW_MS, this.config.OBSERVE_BATCH, this.config.OBSERVE_INTERVAL_MS],
    );
    const stamp = Date.now();
    for (const { id } of due) {
      await this.producer.tryEnqueue(
        JobName.OBSERVE_OPERATION,
        { operationId: id },
        { jobId: `${id}.observe.${stamp}` },
      );
    }
    return due.length;
  }

  /** Overdue recovery obligations: an event, once, and a metric (verity_overdue_obligations). */
  private async escalate(): Promise<number> {
    const overdue = await this.db
      .getRepository(OperationEntity)
      .createQueryBuilder('o')
      .where(`o.status = 'MANUAL_REVIEW' AND (o.obligation->>'due_at')::timestamptz < now()`)
      .andWhere(`o.obligation->>'escalated_at' IS NULL`)
      .limit(BATCH)
      .getMany();
    let escalated = 0;
    for (const op of overdue) {
      if (!op.obligation) continue;
      const at = new Date().toISOString();
      const result = await this.transitions.annotate(this.db.manager, {
        executionId: op.executionId,
        operationId: op.id,
        whileStatus: OperationStatus.MANUAL_REVIEW,
        // Merged, not replaced: a resolution recorded since this read must not be erased (I13).
        merge: { obligation: { escalated_at: at } },
        // A reviewer who re-dated it meanwhile ("still unknown") made it not overdue: no escalation then.
        whileObligationDueAt: op.obligation.due_at,
        type: 'obligation.escalated',
        data: { to: op.obligation.escalation_target, owner: op.obligation.owner, due_at: op.obligation.due_at },
      });
      if (result.won) escalated += 1;
    }
    return escalated;
  }
}
