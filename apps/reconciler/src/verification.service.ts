import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { ConnectorRegistry, ReadBackResult } from '@verity/connectors';
import {
  OperationEntity,
  TenantEntity,
  TransitionService,
  connectorOperation,
  findOperation,
  recoveryObligation,
  snapshotOf,
} from '@verity/persistence';
import { LOGGER, Logger, VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { JobName, JobProducer } from '@verity/queues';
import { OperationStatus, TerminalReason, VerificationMethod } from '@verity/status-model';
import { DataSource } from 'typeorm';

export type VerifyOutcome =
  'verified' | 'held' | 'unknown' | 'rescheduled' | 'failed' | 'skipped: already settled' | 'skipped: lost race';

const S = OperationStatus;
const R = TerminalReason;

const INCONCLUSIVE_REASON: Record<'stale' | 'field_missing' | 'unreachable', TerminalReason> = {
  stale: R.STALE_REPLICA,
  field_missing: R.FIELD_MISSING,
  unreachable: R.SOURCE_UNREACHABLE,
};

/**
 * Turns "we sent it" into "we know". Verification reads back ACKNOWLEDGED operations; reconciliation settles
 * UNKNOWN ones from the source. Neither ever sends anything. "Did not happen" is only concluded from an
 * authoritative read once the settle window has passed; everything inconclusive is retried, then held for a human.
 */
@Injectable()
export class VerificationService {
  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly transitions: TransitionService,
    private readonly producer: JobProducer,
    private readonly connectors: ConnectorRegistry,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  /** Absence is proof only after the window in which a (late) send could still land, and the replica catch up. */
  private get absenceProofAfterMs(): number {
    return Math.max(this.config.SETTLE_WINDOW_MS, this.config.SEND_GRACE_MS + this.config.CONNECTOR_TIMEOUT_MS);
  }

  async verify(operationId: string): Promise<VerifyOutcome> {
    const op = await findOperation(this.db.manager, operationId);
    if (!op || op.status !== S.ACKNOWLEDGED || op.verificationMethod !== VerificationMethod.READ_AFTER_WRITE) {
      return 'skipped: already settled';
    }
    const read = await this.readBack(op);
    switch (read.kind) {
      case 'found':
        return this.settle(op, S.VERIFIED, null, { method: 'read_after_write', ...read.evidence }, 'verified');
      case 'mismatch':
        return this.hold(op, R.INTEGRITY_MISMATCH, {
          method: 'read_after_write',
          mismatched: read.fields,
          ...read.evidence,
        });
      case 'absent': {
        // Never a "did not happen" verdict inside the settle window: the provider may simply not show it yet.
        const since = Date.now() - (op.acknowledgedAt ?? op.updatedAt).getTime();
        if (since < this.config.SETTLE_WINDOW_MS) return this.reschedule(op, JobName.VERIFY_OPERATION);
        const moved = await this.transitions.operation(this.db.manager, {
          operation: snapshotOf(op),
          to: S.UNKNOWN,
          reason: R.CONNECTOR_ERROR,
          patch: { evidence: { method: 'read_after_write', ...read.evidence, found: false } },
          eventData: { detail: 'acknowledged, but not found at the source after the settle window' },
        });
        if (!moved.won) return 'skipped: lost race';
        await this.producer.tryEnqueue(
          JobName.RECONCILE_OPERATION,
          { operationId: op.id },
          { jobId: `${op.id}.reconcile.0` },
        );
        return 'unknown';
      }
      default:
        return this.inconclusive(op, read, JobName.VERIFY_OPERATION);
    }
  }

  async reconcile(operationId: string): Promise<VerifyOutcome> {
    let op = await findOperation(this.db.manager, operationId);
    if (!op || (op.status !== S.UNKNOWN && op.status !== S.RECONCILING)) return 'skipped: already settled';
    const connector = this.connectors.require(op.connector);
    if (op.status === S.UNKNOWN) {
      if (!connector.readBack || !connector.capabilities.read_back) {
        // Nothing can be read back (sandbox.sms): a human decides. Re-sending could deliver a second message.
        return this.hold(op, R.CONNECTOR_ERROR, {
          method: 'none',
          detail: `${op.connector} cannot read back; the outcome can only be established outside Verity`,
        });
      }
      if (op.sentAt && Date.now() - op.sentAt.getTime() > this.config.RECONCILE_DEADLINE_MS) {
        return this.hold(op, R.CONNECTOR_ERROR, {
          method: 'read_after_write',
          detail: 'reconciliation deadline passed',
        });
      }
      const moved = await this.transitions.operation(this.db.manager, { operation: snapshotOf(op), to: S.RECONCILING });
      if (!moved.won) return 'skipped: lost race';
      op = { ...op, status: S.RECONCILING } as OperationEntity;
    }
    const read = await this.readBack(op);
    switch (read.kind) {
      case 'found':
        return this.settle(op, S.VERIFIED, null, { method: 'read_after_write', ...read.evidence }, 'verified');
      case 'mismatch':
        return this.hold(op, R.INTEGRITY_MISMATCH, {
          method: 'read_after_write',
          mismatched: read.fields,
          ...read.evidence,
        });
      case 'absent': {
        const since = Date.now() - (op.sentAt ?? op.createdAt).getTime();
        if (since >= this.absenceProofAfterMs) {
          return this.settle(
            op,
            S.FAILED,
            null,
            { method: 'read_after_write', ...read.evidence, found: false, proven_absent_after_ms: since },
            'failed',
          );
        }
        return this.backToUnknown(op, { ...read.evidence, found: false });
      }
      default:
        return this.inconclusive(op, read, JobName.RECONCILE_OPERATION);
    }
  }

  private async readBack(op: OperationEntity): Promise<ReadBackResult> {
    const connector = this.connectors.require(op.connector);
    if (!connector.readBack) {
      return {
        kind: 'unreachable',
        evidence: { source: op.connector, read_at: new Date().toISOString(), error: 'no read-back' },
      };
    }
    try {
      return await connector.readBack(connectorOperation(op), {
        sandboxUrl: this.config.SANDBOX_URL,
        timeoutMs: this.config.CONNECTOR_TIMEOUT_MS,
      });
    } catch (error) {
      this.logger.error({ err: error, operationId: op.id }, 'read-back threw');
      return {
        kind: 'unreachable',
        evidence: { source: op.connector, read_at: new Date().toISOString(), error: 'read-back error' },
      };
    }
  }

  /** Stale replica, missing field, unreachable source: retried with backoff, then held with the matching reason. */
  private async inconclusive(
    op: OperationEntity,
    read: Extract<ReadBackResult, { kind: 'stale' | 'field_missing' | 'unreachable' }>,
    job: JobName.VERIFY_OPERATION | JobName.RECONCILE_OPERATION,
  ): Promise<VerifyOutcome> {
    if (op.checkCount + 1 >= this.config.RECONCILE_BUDGET) {
      return this.hold(op, INCONCLUSIVE_REASON[read.kind], {
        method: 'read_after_write',
        ...read.evidence,
        checks: op.checkCount + 1,
      });
    }
    if (op.status === S.RECONCILING) return this.backToUnknown(op, { ...read.evidence, inconclusive: read.kind });
    return this.reschedule(op, job);
  }

  private async backToUnknown(op: OperationEntity, evidence: Record<string, unknown>): Promise<VerifyOutcome> {
    const moved = await this.transitions.operation(this.db.manager, {
      operation: snapshotOf(op),
      to: S.UNKNOWN,
      patch: { check_count: op.checkCount + 1, next_check_at: this.nextCheckAt(op.checkCount + 1) },
      eventData: { detail: 'inconclusive read; scheduled again', evidence },
    });
    if (!moved.won) return 'skipped: lost race';
    await this.producer.tryEnqueue(
      JobName.RECONCILE_OPERATION,
      { operationId: op.id },
      { jobId: `${op.id}.reconcile.${op.checkCount + 1}`, delay: this.backoff(op.checkCount + 1) },
    );
    return 'rescheduled';
  }

  private async reschedule(op: OperationEntity, job: JobName.VERIFY_OPERATION | JobName.RECONCILE_OPERATION) {
    const checks = op.checkCount + 1;
    await this.db.query(
      `UPDATE operations SET check_count = $3, next_check_at = $4 WHERE id = $1 AND status = $2 AND check_count = $5`,
      [op.id, op.status, checks, this.nextCheckAt(checks), op.checkCount],
    );
    const kind = job === JobName.VERIFY_OPERATION ? 'verify' : 'reconcile';
    await this.producer.tryEnqueue(
      job,
      { operationId: op.id },
      { jobId: `${op.id}.${kind}.${checks}`, delay: this.backoff(checks) },
    );
    return 'rescheduled' as const;
  }

  private backoff(checks: number): number {
    return Math.min(this.config.READ_BACKOFF_MAX_MS, this.config.READ_BACKOFF_MS * 2 ** Math.max(0, checks - 1));
  }

  private nextCheckAt(checks: number): Date {
    return new Date(Date.now() + this.backoff(checks));
  }

  private async settle(
    op: OperationEntity,
    to: OperationStatus.VERIFIED | OperationStatus.FAILED,
    reason: TerminalReason | null,
    evidence: Record<string, unknown>,
    outcome: VerifyOutcome,
  ): Promise<VerifyOutcome> {
    const moved = await this.transitions.operation(this.db.manager, {
      operation: snapshotOf(op),
      to,
      reason,
      patch: { evidence, observation: to === S.VERIFIED ? 'converged' : null, next_check_at: null },
      eventData: { evidence_source: evidence.source },
    });
    if (!moved.won) return 'skipped: lost race';
    await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: op.executionId });
    return outcome;
  }

  /** MANUAL_REVIEW always carries its recovery obligation. */
  private async hold(
    op: OperationEntity,
    reason: TerminalReason,
    evidence: Record<string, unknown>,
  ): Promise<VerifyOutcome> {
    const tenant = await this.db.getRepository(TenantEntity).findOneBy({ id: op.tenantId });
    const obligation = recoveryObligation({
      reason,
      everSent: op.attempt > 0,
      settings: tenant?.settings,
      now: new Date(),
      dueInMs: this.config.OBLIGATION_DUE_MS,
    });
    const moved = await this.transitions.operation(this.db.manager, {
      operation: snapshotOf(op),
      to: S.MANUAL_REVIEW,
      reason,
      patch: { evidence, obligation: obligation as unknown as Record<string, unknown>, next_check_at: null },
      eventData: { obligation: { owner: obligation.owner, due_at: obligation.due_at } },
    });
    if (!moved.won) return 'skipped: lost race';
    await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: op.executionId });
    return 'held';
  }
}
