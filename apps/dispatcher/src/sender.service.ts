import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { ConnectorRegistry, SendOutcome } from '@verity/connectors';
import {
  Approval,
  OperationEntity,
  TenantEntity,
  TransitionService,
  connectorOperation,
  findExecution,
  findOperation,
  snapshotOf,
} from '@verity/persistence';
import { LOGGER, Logger, VERITY_CONFIG, VerityConfig } from '@verity/platform';
import { JobName, JobProducer } from '@verity/queues';
import { OperationStatus, TerminalReason, VerificationMethod, isTerminalExecution } from '@verity/status-model';
import { DataSource } from 'typeorm';
import { needsApproval } from './operation-rules';

export type DispatchOutcome =
  | 'sent'
  | 'skipped: not found'
  | 'skipped: already settled'
  | 'skipped: execution ended'
  | 'skipped: lost race'
  | 'skipped: approval no longer valid'
  | 'unknown: found already SENT'
  | 'not called: woke up too late';

const S = OperationStatus;

/**
 * Sends one operation, at most once (I3). SENT is committed before the connector is called; whatever happens
 * next, nothing here ever calls the connector for an operation that was already SENT.
 */
@Injectable()
export class SenderService {
  private readonly inFlight = new Set<Promise<unknown>>();

  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly transitions: TransitionService,
    private readonly producer: JobProducer,
    private readonly connectors: ConnectorRegistry,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  async dispatch(operationId: string): Promise<DispatchOutcome> {
    const op = await findOperation(this.db.manager, operationId);
    if (!op) return 'skipped: not found';
    if (op.status === S.SENT) return this.markOrphan(op);
    const release = op.status === S.MANUAL_REVIEW && op.attempt === 0 && hasReleaseResolution(op);
    if (op.status !== S.PREPARED && !release) return 'skipped: already settled';
    const execution = await findExecution(this.db.manager, op.executionId);
    if (!execution || (isTerminalExecution(execution.status) && !release)) return 'skipped: execution ended';
    const connector = this.connectors.require(op.connector);

    if (!release) {
      const tenant = await this.db.getRepository(TenantEntity).findOneBy({ id: op.tenantId });
      if (needsApproval(op, tenant?.settings)) {
        const stale = await this.approvalStaleness(op);
        if (stale) return stale;
      }
    }

    // SENT is committed first: a crash after this line must never lead to a second send.
    const sent = await this.transitions.operation(this.db.manager, {
      operation: snapshotOf(op),
      to: S.SENT,
      actor: release ? 'human' : 'system',
      bumpAttempt: true,
      patch: { sent_at: 'now' },
    });
    if (!sent.won || sent.attempt === undefined) return 'skipped: lost race';
    const committedAt = Date.now();
    const attempt = sent.attempt;

    // A worker paused (GC, SIGSTOP) between the commit and the call may have been declared dead and its operation
    // UNKNOWN → reconciled. Calling now could create an effect after its absence was proven: do not call.
    if (Date.now() - committedAt > this.config.SEND_GRACE_MS) return 'not called: woke up too late';

    const work = this.send(op, attempt, connector.send.bind(connector));
    this.inFlight.add(work);
    try {
      await work;
    } finally {
      this.inFlight.delete(work);
    }
    return 'sent';
  }

  private async send(
    op: OperationEntity,
    attempt: number,
    call: (
      o: ReturnType<typeof connectorOperation>,
      env: { sandboxUrl: string; timeoutMs: number },
    ) => Promise<SendOutcome>,
  ): Promise<void> {
    let outcome: SendOutcome;
    try {
      outcome = await call(connectorOperation(op), {
        sandboxUrl: this.config.SANDBOX_URL,
        timeoutMs: this.config.CONNECTOR_TIMEOUT_MS,
      });
    } catch (error) {
      // A connector bug is not proof of anything: the request may have left. UNKNOWN, never FAILED (I4).
      this.logger.error({ err: error, operationId: op.id }, 'connector threw');
      outcome = { status: S.UNKNOWN, reason: TerminalReason.CONNECTOR_ERROR, detail: 'connector error' };
    }
    const sentSnapshot = { ...snapshotOf(op), status: S.SENT, attempt };
    const result = await this.transitions.operation(this.db.manager, {
      operation: sentSnapshot,
      to: outcome.status,
      reason: outcome.status === S.ACKNOWLEDGED ? null : outcome.reason,
      patch:
        outcome.status === S.ACKNOWLEDGED
          ? { provider_ref: outcome.providerRef, acknowledged_at: 'now', next_check_at: new Date() }
          : outcome.status === S.FAILED
            ? { evidence: { method: 'send_outcome', detail: outcome.detail, provider_error: outcome.providerError } }
            : { evidence: { method: 'send_outcome', detail: outcome.detail } },
      eventData: { detail: outcome.detail },
    });
    if (!result.won) {
      // Someone else (the sweeper) already decided this operation is UNKNOWN: our late write loses, by design.
      this.logger.warn({ operationId: op.id, outcome: outcome.status }, 'late send outcome rejected by CAS');
      return;
    }
    if (outcome.status === S.ACKNOWLEDGED && op.verificationMethod === VerificationMethod.READ_AFTER_WRITE) {
      await this.producer.tryEnqueue(
        JobName.VERIFY_OPERATION,
        { operationId: op.id },
        { jobId: `${op.id}.verify.0`, delay: this.config.VERIFY_FIRST_DELAY_MS },
      );
    } else if (outcome.status === S.UNKNOWN) {
      await this.producer.tryEnqueue(
        JobName.RECONCILE_OPERATION,
        { operationId: op.id },
        { jobId: `${op.id}.reconcile.0` },
      );
    }
    await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: op.executionId });
  }

  /** I3: found already SENT (a crash, a stalled or duplicate job): never call again, mark UNKNOWN. */
  private async markOrphan(op: OperationEntity): Promise<DispatchOutcome> {
    const moved = await this.transitions.operation(this.db.manager, {
      operation: snapshotOf(op),
      to: S.UNKNOWN,
      reason: TerminalReason.CONNECTOR_ERROR,
      eventData: { detail: 'found already SENT by a later job: the send may or may not have happened' },
    });
    if (moved.won) {
      await this.producer.tryEnqueue(
        JobName.RECONCILE_OPERATION,
        { operationId: op.id },
        { jobId: `${op.id}.reconcile.0` },
      );
      await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: op.executionId });
    }
    return 'unknown: found already SENT';
  }

  /**
   * Approval is re-validated at dispatch: an expired grant is stale authority; a source that changed since the
   * grant is a stale baseline. Either sends the operation back for approval, with an event saying which.
   */
  private async approvalStaleness(op: OperationEntity): Promise<DispatchOutcome | null> {
    const approval = op.approval;
    if (approval?.state !== 'granted') return 'skipped: approval no longer valid';
    let staleness: 'approval.stale_authority' | 'approval.stale_baseline' | null = null;
    let currentBaseline: unknown = approval.baseline;
    if (approval.expires_at && new Date(approval.expires_at).getTime() <= Date.now()) {
      staleness = 'approval.stale_authority';
    } else {
      const connector = this.connectors.require(op.connector);
      if (connector.readContext && approval.baseline !== undefined) {
        const context = await connector.readContext(connectorOperation(op), {
          sandboxUrl: this.config.SANDBOX_URL,
          timeoutMs: this.config.CONNECTOR_TIMEOUT_MS,
        });
        if (context.kind === 'state') {
          currentBaseline = context.state;
          if (JSON.stringify(context.state) !== JSON.stringify(approval.baseline))
            staleness = 'approval.stale_baseline';
        }
      }
    }
    if (!staleness) return null;
    const next: Approval = { state: 'requested', requested_at: new Date().toISOString(), baseline: currentBaseline };
    await this.transitions.annotate(this.db.manager, {
      executionId: op.executionId,
      operationId: op.id,
      whileStatus: S.PREPARED,
      patch: { approval: next as unknown as Record<string, unknown> },
      type: staleness,
      data: {
        previous_grant: {
          decided_by: approval.decided_by,
          decided_at: approval.decided_at,
          expires_at: approval.expires_at,
        },
        baseline_at_grant: approval.baseline,
        baseline_now: currentBaseline,
      },
    });
    await this.transitions.annotate(this.db.manager, {
      executionId: op.executionId,
      operationId: op.id,
      type: 'approval.requested',
      data: { policy: 're-approval', cause: staleness },
    });
    await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: op.executionId });
    return 'skipped: approval no longer valid';
  }

  /** Graceful SIGTERM: let in-flight sends finish and record their outcome. */
  async drain(): Promise<void> {
    await Promise.allSettled([...this.inFlight]);
  }
}

function hasReleaseResolution(op: OperationEntity): boolean {
  const resolution = (op.obligation as { resolution?: { status?: string } } | null)?.resolution;
  return resolution?.status === S.SENT;
}
