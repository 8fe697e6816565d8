import { Inject, Injectable, OnModuleDestroy } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import {
  Connector,
  ReadBackResult,
  SendOutcome,
  TenantConnectorSettings,
  readBackUnbound,
  TenantConnectors,
  capAmount,
  clipValue,
} from '@verity/connectors';
import {
  Approval,
  CapExceeded,
  ExecutionMovesInput,
  OperationEntity,
  eventRecordedForWorker,
  eventsWritten,
  isDatabaseUnavailable,
  isUniqueViolation,
  SendGuard,
  SendRefusal,
  AnnotationInput,
  TransitionResult,
  TransitionService,
  commitWithinSpendingCaps,
  connectorOperation,
  describeCapExceeded,
  findOperationToSend,
  recordSendSecretsUnopened,
  SecretUnreadableError,
  findUnsettledResend,
  grantKeyStands,
  OperationToSend,
  preparedFromStaleRead,
  sendRefusals,
  withdrawsRelease,
  settledByReadBack,
  snapshotOf,
  transaction,
} from '@verity/persistence';
import { LOGGER, Logger, VERITY_CONFIG, VerityConfig, newId, testPause } from '@verity/platform';
import { JobName, JobProducer, jobId, advanceRetriesOf } from '@verity/queues';
import {
  LATE_ACKNOWLEDGEMENT_TRIES,
  LATE_REJECTION_TRIES,
  OperationStatus,
  REFERENCE_UNSETTLED,
  refutedRetryCancel,
  StaleAuthorityCause,
  answerWriteRetry,
  Staleness,
  TerminalReason,
  baselineStaleness,
  checkAfterSend,
  decideReadBack,
  grantAtDispatch,
  isTerminalOperation,
  mayStillCall,
  sendStart,
  spendingCapRefusalCause,
} from '@verity/status-model';
import { DataSource, EntityManager } from 'typeorm';
import { LifecycleService } from './lifecycle.service';
import { dispatchRefused } from './metrics';
import { needsApproval } from './operation-rules';

export type DispatchOutcome =
  | 'sent'
  | 'skipped: not found'
  | 'skipped: lost race'
  | 'skipped: already SENT by another sender'
  | 'skipped: approval no longer valid'
  | 'skipped: precondition unread'
  | `skipped: refused by the send guard (${string})`
  | 'unknown: found already SENT'
  | 'not called: woke up too late'
  | 'refused: spending cap';

const S = OperationStatus;

export interface SendOptions {
  /**
   * Whether the execution moves on in this process once the outcome is written. A dispatch job asks for it; an advance
   * job that sends an operation itself does not (its own loop takes the next step).
   */
  advanceAfter: boolean;
  /** Which job sends (what an operation found already SENT means depends on it: `sendStart`). */
  sender: 'dispatch-job' | 'advance-job';
  /**
   * The execution's moves to write with this operation's VERIFIED when the read at send concludes (the advance job's,
   * when this is the last operation to settle): one statement instead of two (TransitionService `thenExecution`).
   */
  thenExecution?: ExecutionMovesInput;
  /**
   * The execution's moves to write before this operation's SENT, in its statement (a quiet preparation and its one
   * send: TransitionService `executionFirst`); the send guard then accepts the execution where they start.
   */
  executionFirst?: ExecutionMovesInput;
}

/** What a send did, and the status this send last wrote to its operation (null when it wrote none, or lost it). */
export interface SendReport {
  outcome: DispatchOutcome;
  written: OperationStatus | null;
  /** Why the send guard refused the send (nothing was sent); `preparedFromStaleRead` tells whether to read again. */
  refusals?: SendRefusal[];
  /** The execution's moves asked for with `thenExecution` were written with the operation's VERIFIED. */
  executionMoved?: true;
  /** The execution's moves asked for with `executionFirst` were written with the operation's SENT. */
  executionMovedFirst?: true;
}

/**
 * Sends one operation, at most once (I3). SENT is committed before the connector is called; whatever happens
 * next, nothing here ever calls the connector for an operation that was already SENT.
 */

@Injectable()
export class SenderService implements OnModuleDestroy {
  private readonly inFlight = new Set<Promise<unknown>>();
  private stopping = false;

  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly transitions: TransitionService,
    private readonly producer: JobProducer,
    private readonly connectors: TenantConnectors,
    private readonly lifecycle: LifecycleService,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  /**
   * `stillOwned` asks whether this worker still holds the dispatch job's lock (true / false), or null when it cannot
   * tell: a worker whose lock ran out may already have been declared dead by the sweeper.
   */
  async dispatch(
    operationId: string,
    stillOwned?: () => Promise<boolean | null>,
    options: SendOptions = { advanceAfter: true, sender: 'dispatch-job' },
  ): Promise<DispatchOutcome> {
    let report = await this.sendOperation(operationId, undefined, stillOwned, options);
    // Refused because the tenant changed the connector's settings or its approval policy between this job's read and
    // its SENT statement: once more, from a fresh read (nothing else would send it before the sweeper looks again).
    if (preparedFromStaleRead(report.refusals)) {
      report = await this.sendOperation(operationId, undefined, stillOwned, options);
    }
    return report.outcome;
  }

  /**
   * The operation as a send needs it, read by this send. Secrets that do not open with this SECRETS_KEY fail the job
   * (retried until the key is fixed: no call is built without the secrets the tenant set), and the history says so
   * once per operation — the error's class, never its text — so the wait is not silent.
   */
  private async operationToSend(operationId: string): Promise<OperationToSend | null> {
    try {
      return await findOperationToSend(this.db.manager, operationId, this.connectors.secretsAccess());
    } catch (error) {
      if (!(error instanceof SecretUnreadableError)) throw error;
      const recorded = await recordSendSecretsUnopened(this.db, operationId, error.name);
      this.logger.error({ err: error, operationId, recorded }, 'send not made: a secret does not open');
      throw error;
    }
  }

  /**
   * `held`: the operation with its tenant and settings as the caller already read them — the advance job, for the
   * step that found it ready. A second read would tell nothing the SENT statement does not check itself (I15); it is
   * made only when nothing is held.
   */
  async sendOperation(
    operationId: string,
    held: OperationToSend | undefined,
    stillOwned: (() => Promise<boolean | null>) | undefined,
    options: SendOptions,
  ): Promise<SendReport> {
    const outcome = (what: DispatchOutcome): SendReport => ({ outcome: what, written: null });
    const found = held ?? (await this.operationToSend(operationId));
    if (!found) return outcome('skipped: not found');
    const { operation: op, executionDeadline, tenant, approvalPolicy, settings, clockOffsetMs } = found;
    const start = sendStart({
      status: op.status,
      attempt: op.attempt,
      resolutionStatus: (op.obligation as { resolution?: { status?: string } } | null)?.resolution?.status,
      sender: options.sender,
    });
    if (start.kind === 'orphan') return outcome(await this.markOrphan(op));
    if (start.kind === 'sending-elsewhere') return outcome('skipped: already SENT by another sender');
    const release = start.kind === 'release';
    // What a send needs is checked by the SENT statement itself (I15), so a stray, duplicated, replayed or hand-made
    // job cannot send early or twice: the reads here only decide what to try, never whether it is safe.
    const guard: SendGuard = release
      ? {
          kind: 'release',
          approvalRequired: needsApproval(op, tenant?.settings, this.connectors),
          approvalPolicy,
          settingsVersion: settings.version,
        }
      : {
          kind: 'dispatch',
          approvalRequired: needsApproval(op, tenant?.settings, this.connectors),
          approvalPolicy,
          settingsVersion: settings.version,
          executionFrom: options.executionFirst?.from,
        };
    if (start.kind === 'moved') return this.refused(op, ['status_moved']);
    const connector = this.connectors.require(op.connector);
    // The tenant's settings for this connector (allowlist, secrets, spending caps), read with the operation in the same
    // statement: this send's own read, or the advance job's read of the step that found the operation ready.
    const tenantEnv: TenantConnectorSettings = {
      allowHosts: settings.allowHosts,
      secrets: settings.secrets,
      readBackBinding: settings.readBackBinding,
    };

    if (!release && op.approval?.state === 'granted' && op.nextCheckAt === null) {
      const stale = await this.approvalStaleness(op, tenantEnv, executionDeadline, tenant, clockOffsetMs);
      if (stale) return outcome(stale);
    }

    await testPause(this.logger, this.config.TEST_PAUSE_BEFORE_SENT_MS, 'paused before SENT', { operationId: op.id });
    let committingAt = Date.now();
    // SENT is committed first: a crash after this line must never lead to a second send. Under a spending cap the
    // commit waits its turn and is refused (never sent) when the cap is reached.
    const committed = await commitWithinSpendingCaps(
      this.db,
      {
        tenantId: op.tenantId,
        connector: op.connector,
        operationId: op.id,
        caps: settings.spendingCaps,
        amountOf: (cap) => capAmount(op.params, cap),
        lockOperationFirst: release,
        resendRef: op.resendRef,
        failedSpendsNothing: connector.failedSpendsNothing === true,
      },
      (db) => {
        committingAt = Date.now();
        return this.transitions.operation(db, {
          operation: snapshotOf(op),
          to: S.SENT,
          actor: release ? 'human' : 'system',
          bumpAttempt: true,
          sendGuard: guard,
          // The precondition reads are over; the checks of the effect (verification) count from zero.
          patch: { sent_at: 'now', check_count: 0, next_check_at: null },
          executionFirst: release ? undefined : options.executionFirst,
        });
      },
    );
    if ('exceeded' in committed) {
      await testPause(this.logger, this.config.TEST_PAUSE_BEFORE_CAP_REFUSAL_MS, 'paused before cap refusal', {
        operationId: op.id,
      });
      // Only a send that could otherwise happen is cancelled for the cap, and the cancel's own statement checks it (the
      // send guard): settings changed since they were read (a cap raised or removed) prepare it again instead, and a
      // stray job changes nothing.
      const refused = await this.refuseOverCap(op, committed.exceeded, release, guard);
      if (refused !== 'skipped: lost race') return outcome(refused);
      const refusals = await sendRefusals(this.db.manager, op.id, guard);
      if (refusals.length > 0) return this.refusedByGuard(op, refusals, options, release);
      return outcome(refused);
    }
    const sent = committed.sent;
    if (!sent.won || sent.attempt === undefined) {
      const refusals = await sendRefusals(this.db.manager, op.id, guard);
      return refusals.length > 0 ? this.refusedByGuard(op, refusals, options, release) : outcome('skipped: lost race');
    }
    const attempt = sent.attempt;
    // Every report from here on says whether the preparation's moves went with the SENT (the caller's row follows).
    const movedFirst: Pick<SendReport, 'executionMovedFirst'> =
      options.executionFirst && sent.executionMoved ? { executionMovedFirst: true } : {};
    await testPause(this.logger, this.config.TEST_PAUSE_AFTER_SENT_MS, 'paused after SENT', { operationId: op.id });

    // A worker paused (GC, SIGSTOP) between the commit and the call may have been declared dead and its operation
    // UNKNOWN → reconciled. Calling now could create an effect after its absence was proven: do not call.
    const late = await this.tooLate(committingAt, stillOwned);
    if (late) {
      this.logger.warn(
        { operationId: op.id, attempt, why: late },
        'not calling the connector: woke up too late after SENT',
      );
      // Not called by this attempt, but SENT cannot be taken back: UNKNOWN now (instead of when the sweeper finds it),
      // and the reconciler proves the absence from the source.
      await this.markUnknown(
        { ...snapshotOf(op), status: S.SENT, attempt },
        op.executionId,
        'SENT, then not called: the worker woke up too late; nothing was handed to the connector by this attempt',
      );
      return { ...outcome('not called: woke up too late'), ...movedFirst };
    }

    const work = this.send(op, attempt, connector, tenantEnv, options);
    this.inFlight.add(work);
    try {
      return { outcome: 'sent', ...(await work), ...movedFirst };
    } finally {
      this.inFlight.delete(work);
    }
  }

  private async send(
    op: OperationEntity,
    attempt: number,
    connector: Connector,
    tenant: TenantConnectorSettings,
    options: SendOptions,
  ): Promise<Pick<SendReport, 'written' | 'executionMoved'>> {
    let outcome: SendOutcome;
    try {
      outcome = await connector.send(connectorOperation(op), this.connectors.callEnvironment(tenant));
    } catch (error) {
      // A connector bug is not proof of anything: the request may have left. UNKNOWN, never FAILED (I4).
      this.logger.error({ err: error, operationId: op.id }, 'connector threw');
      outcome = { status: S.UNKNOWN, reason: TerminalReason.CONNECTOR_ERROR, detail: 'connector error' };
    }
    await testPause(this.logger, this.config.TEST_PAUSE_AFTER_CALL_MS, 'paused after call', { operationId: op.id });
    const sentSnapshot = { ...snapshotOf(op), status: S.SENT, attempt };
    const check = checkAfterSend({ status: outcome.status, verificationMethod: op.verificationMethod });
    const recording = this.writeAnswer(op, (eventId) =>
      this.transitions.operation(this.db.manager, {
        eventId,
        operation: sentSnapshot,
        to: outcome.status,
        reason: outcome.status === S.ACKNOWLEDGED ? null : outcome.reason,
        patch:
          outcome.status === S.ACKNOWLEDGED
            ? // Owed its first read from the acknowledgement, by the database's clock (the sweeper's), as acknowledged_at.
              { provider_ref: outcome.providerRef, acknowledged_at: 'now', next_check_at: 'now' }
            : outcome.status === S.FAILED
              ? { evidence: { method: 'send_outcome', detail: outcome.detail, provider_error: outcome.providerError } }
              : { evidence: { method: 'send_outcome', detail: outcome.detail } },
        // A refused send records its cause and rule: the status model derives a policy failure from them.
        eventData:
          outcome.status === S.FAILED && outcome.refused
            ? { detail: outcome.detail, cause: outcome.refused.cause, refusal: outcome.refused.rule }
            : { detail: outcome.detail },
      }),
    );
    // The read-back at send starts while the acknowledgement is being committed: a read sends nothing, and what it
    // found is written only once the acknowledgement is (VERIFIED moves from ACKNOWLEDGED, by compare-and-set).
    const reading =
      check === 'verify' &&
      outcome.status === S.ACKNOWLEDGED &&
      this.config.VERIFY_AT_SEND &&
      this.config.VERIFY_FIRST_DELAY_MS === 0
        ? this.readAtOnce(op, outcome.providerRef, connector, tenant, recording)
        : null;
    const result = await recording.catch((error: unknown) => {
      // The provider answered and no write of its answer went through (Postgres refused it, or stayed away past
      // ANSWER_WRITE_RETRY_MS, or the process is stopping): the operation stays SENT until the sweeper holds it as
      // UNKNOWN, and the answer would end with this job. Logged, redacted as the connector returned it, for the person
      // who settles the operation (a reference to look it up by).
      this.logger.error(
        {
          err: error,
          operationId: op.id,
          outcome: outcome.status,
          providerRef: outcome.status === S.ACKNOWLEDGED ? outcome.providerRef : undefined,
          detail: outcome.detail,
        },
        'the provider answered but its answer could not be recorded: the operation will be held as unknown',
      );
      throw error;
    });
    if (!result.won) {
      // Someone else (the sweeper) already decided this operation is UNKNOWN: our late write loses, by design.
      this.logger.warn({ operationId: op.id, outcome: outcome.status }, 'late send outcome rejected by CAS');
      if (outcome.status === S.ACKNOWLEDGED) await this.recordLateAcknowledgement(op, outcome.providerRef);
      if (outcome.status === S.FAILED) await this.recordLateRejection(op, outcome);
      return { written: null };
    }
    const verified =
      reading === null
        ? null
        : await this.verifyAtOnce(
            op,
            attempt,
            await reading,
            options.thenExecution,
            readBackUnbound(connector, op.action, op.params),
          );
    if (check === 'verify' && !verified) {
      await this.producer.tryEnqueue(
        JobName.VERIFY_OPERATION,
        { operationId: op.id, executionId: op.executionId },
        { jobId: jobId(JobName.VERIFY_OPERATION, op.id, 0), delay: this.config.VERIFY_FIRST_DELAY_MS },
      );
    } else if (check === 'reconcile') {
      await this.producer.tryEnqueue(
        JobName.RECONCILE_OPERATION,
        { operationId: op.id, executionId: op.executionId },
        { jobId: jobId(JobName.RECONCILE_OPERATION, op.id, 0) },
      );
    }
    if (options.advanceAfter) await this.advanceExecution(op.executionId);
    // A VERIFIED that lost its compare-and-set was not this send's to write: it reports what it did write, so its caller
    // reads the operation again instead of taking it for VERIFIED (whoever moved it may have moved it elsewhere).
    if (!verified?.won) return { written: outcome.status };
    return verified.executionMoved ? { written: S.VERIFIED, executionMoved: true } : { written: S.VERIFIED };
  }

  /**
   * The provider's answer, written durably: the provider's reference or rejection exists nowhere else, so a write that
   * Postgres could not take (`isDatabaseUnavailable`: unreachable, restarting, a statement with no reply) is made again
   * with backoff (`answerWriteRetry`, within ANSWER_WRITE_RETRY_MS, never once the process is stopping). Every try names
   * the same event id, and after a try whose reply never came, whether it committed is asked by that id: a compare-and-
   * set that then loses (to that try, not to another writer), or an annotation that would be written a second time (its
   * status unchanged, its event id taken), is that first try's write — not a late answer, an error, or a second event.
   * A refusal of another kind (a constraint, a trigger) is not tried again.
   */
  private async writeAnswer(
    op: Pick<OperationEntity, 'id' | 'executionId'>,
    write: (eventId: string) => Promise<TransitionResult>,
  ): Promise<TransitionResult> {
    const eventId = newId('evt');
    const written = (): Promise<boolean> => eventRecordedForWorker(this.db.manager, op.id, eventId);
    let firstFailureAt: number | null = null;
    for (let tries = 1; ; tries += 1) {
      try {
        if (firstFailureAt !== null && (await written())) return this.writtenBefore(op, eventId, tries);
        const result = await write(eventId);
        if (result.won || firstFailureAt === null) return result;
        // Lost after a try whose reply never came: to that try (committed meanwhile), or to another writer.
        return (await written()) ? this.writtenBefore(op, eventId, tries) : result;
      } catch (error) {
        // The first try committed while this one waited for its row: the event's id is taken.
        if (firstFailureAt !== null && isUniqueViolation(error) && (await written().catch(() => false))) {
          return this.writtenBefore(op, eventId, tries);
        }
        firstFailureAt ??= Date.now();
        const next = isDatabaseUnavailable(error)
          ? answerWriteRetry({
              tries,
              sinceFirstFailureMs: Date.now() - firstFailureAt,
              limitMs: this.config.ANSWER_WRITE_RETRY_MS,
              stopping: this.stopping,
            })
          : { again: false as const };
        if (!next.again) throw error;
        this.logger.warn(
          { err: error, operationId: op.id, tries, waitMs: next.waitMs },
          "the provider's answer could not be written; trying again",
        );
        await new Promise((resolve) => setTimeout(resolve, next.waitMs));
      }
    }
  }

  private writtenBefore(
    op: Pick<OperationEntity, 'id' | 'executionId'>,
    eventId: string,
    tries: number,
  ): TransitionResult {
    this.logger.warn(
      { operationId: op.id, eventId, tries },
      "the provider's answer was written by an earlier try whose reply was lost",
    );
    // That try's statement committed without its caller hearing back, so nothing announced its event: a stream waiting
    // on the execution would see it only at its next poll.
    eventsWritten(this.db.manager, op.executionId);
    return { won: true, eventId };
  }

  /**
   * The happy path in one job: the first read-back is made here, right after the send, when nothing asks it to wait
   * (VERIFY_FIRST_DELAY_MS 0). Made while the acknowledgement is committed (the test-only kill point
   * TEST_PAUSE_BEFORE_READ_MS waits for that commit, so a process killed there leaves it ACKNOWLEDGED). null: the
   * connector cannot read back, or the read threw — either concludes nothing.
   */
  private async readAtOnce(
    op: OperationEntity,
    providerRef: Record<string, unknown> | null,
    connector: Connector,
    tenant: TenantConnectorSettings,
    recording: Promise<unknown>,
  ): Promise<ReadBackResult | null> {
    const readBack = connector.readBack;
    if (!readBack) return null;
    if (this.config.TEST_PAUSE_BEFORE_READ_MS > 0) {
      await recording.catch(() => undefined);
      await testPause(this.logger, this.config.TEST_PAUSE_BEFORE_READ_MS, 'paused before read-back', {
        operationId: op.id,
      });
    }
    try {
      return await readBack({ ...connectorOperation(op), providerRef }, this.connectors.callEnvironment(tenant));
    } catch (error) {
      this.logger.warn({ err: error, operationId: op.id }, 'read-back at send threw; leaving it to the verify job');
      return null;
    }
  }

  /**
   * Only a read that finds the effect as sent concludes here (ACKNOWLEDGED → VERIFIED, exactly as the verify job would
   * write it); anything else — absent, lagging, unreadable, different — is left to the verify job as if this read had
   * not been made, so the settle window and the check budget keep their meaning. A read never sends. Returns null when
   * the verify job is still needed; else the VERIFIED write's result (`won`, and `executionMoved` when asked).
   */
  private async verifyAtOnce(
    op: OperationEntity,
    attempt: number,
    read: ReadBackResult | null,
    thenExecution: ExecutionMovesInput | undefined,
    unbound: boolean,
  ): Promise<TransitionResult | null> {
    if (!read) return null;
    const decision = decideReadBack({
      status: S.ACKNOWLEDGED,
      read: read.kind,
      absenceIsProof: false,
      acknowledged: true,
      checksBefore: 0,
      budget: this.config.RECONCILE_BUDGET,
      sourceProvesAbsence: false,
    });
    if (decision.kind !== 'verified') return null;
    const evidence = { method: 'read_after_write', ...read.evidence };
    // A lost compare-and-set means the operation moved on (a verify job the sweeper owed it got there first): whoever
    // moved it owns what comes next, and a verify job would find nothing to do. A write that fails (Postgres away)
    // leaves it ACKNOWLEDGED: the verify job takes it, as it would have without this read.
    try {
      return await this.transitions.operation(this.db.manager, {
        operation: { ...snapshotOf(op), status: S.ACKNOWLEDGED, attempt },
        to: S.VERIFIED,
        reason: null,
        // The read was made under the settings this send read; an admin may have bound read-backs since.
        readBackUnbound: unbound ? true : undefined,
        patch: settledByReadBack(S.VERIFIED, null, evidence, this.config),
        eventData: { evidence_source: evidence.source },
        thenExecution,
      });
    } catch (error) {
      this.logger.warn(
        { err: error, operationId: op.id },
        'VERIFIED at send not written; leaving it to the verify job',
      );
      return null;
    }
  }

  /**
   * The execution moves on in this process at once (running → waiting_for_tool, or to completion): a job would cost
   * more than the move. If the move fails here, a job does it; if this process dies first, the sweeper owes it.
   */
  private async advanceExecution(executionId: string): Promise<void> {
    try {
      await this.lifecycle.advance(executionId);
    } catch (error) {
      this.logger.warn({ err: error, executionId }, 'advance after the send failed; leaving it to a job');
      await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId });
    }
  }

  /**
   * May the connector still be called? The sweeper declares a SENT operation orphaned (UNKNOWN, then reconciled) only
   * when no worker holds its job's lock AND DISPATCH_LOCK_MS + SEND_GRACE_MS have passed since SENT. So calling is
   * safe while this worker still holds the lock, or within SEND_GRACE_MS of starting the SENT commit (counted from
   * before the commit, so a freeze while it was in flight counts). A worker frozen longer than that, whose lock ran
   * out, does not call: its operation may already be UNKNOWN and on its way to a "proven absent" verdict.
   */
  private async tooLate(committingAt: number, stillOwned?: () => Promise<boolean | null>): Promise<string | null> {
    const sinceCommitStartMs = Date.now() - committingAt;
    const graceMs = this.config.SEND_GRACE_MS;
    // The lock is asked only once the grace is over (a Redis round trip the common case does without).
    const lockOwned = sinceCommitStartMs <= graceMs || !stillOwned ? null : await stillOwned();
    const may = mayStillCall({ sinceCommitStartMs, graceMs, lockOwned });
    return may.call ? null : may.why;
  }

  /** I3: found already SENT (a crash, a stalled or duplicate job): never call again, mark UNKNOWN. */
  private async markOrphan(op: OperationEntity): Promise<DispatchOutcome> {
    await this.markUnknown(
      snapshotOf(op),
      op.executionId,
      'found already SENT by a later job: the send may or may not have happened',
    );
    return 'unknown: found already SENT';
  }

  private async markUnknown(operation: ReturnType<typeof snapshotOf>, executionId: string, detail: string) {
    const moved = await this.transitions.operation(this.db.manager, {
      operation,
      to: S.UNKNOWN,
      reason: TerminalReason.CONNECTOR_ERROR,
      eventData: { detail },
    });
    if (moved.won) {
      await this.producer.tryEnqueue(
        JobName.RECONCILE_OPERATION,
        { operationId: operation.id, executionId },
        { jobId: jobId(JobName.RECONCILE_OPERATION, operation.id, 0) },
      );
      await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId });
    }
  }

  /**
   * Approval is re-validated at dispatch: an expired grant, or one whose deciding key has been revoked since, is stale
   * authority; a source that changed since the grant is a stale baseline. Either sends the operation back for approval,
   * with an event saying which (and, for stale authority, why: `cause`). Expired by the database's clock
   * (`clockOffsetMs` from this process'), the one its `expires_at` is written by and the SENT statement compares it
   * with: judged by a host clock that runs ahead, a grant still valid was withdrawn and asked for again after every
   * approval, and the operation was never sent.
   */
  private async approvalStaleness(
    op: OperationEntity,
    tenant: TenantConnectorSettings,
    executionDeadline: Date,
    tenantRow: Parameters<LifecycleService['preconditionUnread']>[1]['tenant'],
    clockOffsetMs: number,
  ): Promise<DispatchOutcome | null> {
    const approval = op.approval;
    const connector = this.connectors.require(op.connector);
    const databaseNow = new Date(Date.now() + clockOffsetMs);
    const deciderStands = await grantKeyStands(this.db.manager, op.tenantId, approval?.decided_by);
    const grant = grantAtDispatch(approval, databaseNow, connector.readContext !== undefined, deciderStands);
    if (grant.kind === 'not-granted' || !approval) return 'skipped: approval no longer valid';
    if (grant.kind === 'valid') return null;
    if (grant.kind === 'stale')
      return this.withdrawGrant(op, approval, grant.staleness, approval.baseline, grant.cause);
    let currentBaseline: unknown = approval.baseline;
    if (connector.readContext) {
      const context = await this.lifecycle.readContextOf(connector, op, () => this.connectors.callEnvironment(tenant));
      if (context.kind === 'unreachable') {
        // I15: the grant holds only for the source as the reviewer saw it; unread, it is not sent blind. The
        // lifecycle reads it again with backoff (then this check runs again), or holds it for a human.
        const outcome = await this.lifecycle.preconditionUnread(this.db.manager, {
          operation: op,
          deadline: executionDeadline,
          evidence: context.evidence,
          precondition: 'approval_baseline',
          tenant: tenantRow,
          clockOffsetMs,
        });
        this.logger.warn({ operationId: op.id, outcome }, 'approval baseline unreadable at dispatch; not sent');
        if (outcome === 'moved')
          await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: op.executionId });
        return 'skipped: precondition unread';
      }
      currentBaseline = context.state;
    }
    const staleness = baselineStaleness(approval.baseline, currentBaseline as Record<string, unknown>);
    if (!staleness) return null;
    return this.withdrawGrant(op, approval, staleness, currentBaseline);
  }

  /**
   * A grant judged stale is withdrawn and approval asked for again. Withdrawn only from a PREPARED operation whose
   * grant still stands, the one judged: a sender whose view is older (the operation was sent meanwhile, another sender
   * withdrew the grant first, or a reviewer has granted it again since) writes nothing — no request nobody will answer,
   * no fresh grant dropped.
   */
  private async withdrawGrant(
    op: OperationEntity,
    approval: Approval,
    staleness: Staleness,
    currentBaseline: unknown,
    cause?: StaleAuthorityCause,
  ): Promise<DispatchOutcome> {
    // Its requested_at is stamped by the statement, from the database's clock (stampApprovalRequest).
    const next: Approval = { state: 'requested', baseline: currentBaseline };
    // The withdrawal and the new request in one transaction: a crash between them would leave the approval
    // `requested` with no `approval.requested` event, and planning, which sees it requested, never writes one.
    return this.moveWithEvent(
      op,
      (tx) =>
        this.transitions.annotate(tx, {
          executionId: op.executionId,
          operationId: op.id,
          whileStatus: S.PREPARED,
          whileApprovalGranted: true,
          // The grant judged stale, not one given again since (withdrawn by another sender, then granted anew).
          whileGrantDecidedAt: approval.decided_at ?? null,
          patch: { approval: next as unknown as Record<string, unknown> },
          stampApprovalRequest: true,
          type: staleness,
          data: {
            ...(cause && { cause }),
            previous_grant: {
              decided_by: approval.decided_by,
              decided_at: approval.decided_at,
              expires_at: approval.expires_at,
            },
            baseline_at_grant: approval.baseline,
            baseline_now: currentBaseline,
          },
        }),
      { type: 'approval.requested', data: { policy: 're-approval', cause: staleness } },
      'skipped: approval no longer valid',
    );
  }

  /**
   * Over a spending cap: refused before anything is sent. PREPARED → CANCELLED (never sent; a retry passes once the
   * window has room, unless the amount alone is above the cap or the cap cannot count it), with the cap, its period and
   * the usage in the evidence and in a `spending_cap.exceeded` event.
   */
  private async refuseOverCap(
    op: OperationEntity,
    exceeded: CapExceeded,
    release: boolean,
    guard: SendGuard,
  ): Promise<DispatchOutcome> {
    const detail = describeCapExceeded(op.connector, exceeded);
    const data = {
      connector: op.connector,
      rule: exceeded.rule,
      cap: exceeded.cap,
      period: exceeded.cap.period,
      usage: exceeded.usage,
      requested: exceeded.requested,
      // A cap with a currency: the currency this operation has instead (clipped: it is the caller's value).
      ...(exceeded.currency_found
        ? {
            currency_found: {
              field: exceeded.currency_found.field,
              value: clipValue(exceeded.currency_found.value, 40),
            },
          }
        : {}),
    };
    // The cancel and the event that explains it in one transaction: a process stopping between them left an
    // operation CANCELLED for a cap with no spending_cap.exceeded in its history.
    return this.moveWithEvent(
      op,
      (tx) =>
        this.transitions.operation(tx, {
          operation: snapshotOf(op),
          to: S.CANCELLED,
          actor: release ? 'human' : 'system',
          patch: { evidence: { method: 'spending_cap', detail, ...data } },
          eventData: {
            cause: spendingCapRefusalCause({
              rule: exceeded.rule,
              requested: exceeded.requested,
              maxAmount: exceeded.cap.max_amount,
            }),
            detail,
          },
          refusedSendGuard: guard,
        }),
      { type: 'spending_cap.exceeded', data: { ...data, detail } },
      'refused: spending cap',
    );
  }

  /**
   * A move of the operation and the event that explains it, written in one transaction; the event only once the move
   * is won, and then the execution advances (`outcome`). Another writer moved it first: 'skipped: lost race'.
   */
  private async moveWithEvent(
    op: OperationEntity,
    move: (tx: EntityManager) => Promise<TransitionResult>,
    event: Pick<AnnotationInput, 'type' | 'data'>,
    outcome: DispatchOutcome,
  ): Promise<DispatchOutcome> {
    const moved = await transaction(this.db, async (tx) => {
      const won = await move(tx);
      if (!won.won) return won;
      await this.transitions.annotate(tx, { executionId: op.executionId, operationId: op.id, ...event });
      return won;
    });
    if (!moved.won) return 'skipped: lost race';
    await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: op.executionId });
    return outcome;
  }

  /**
   * A retry whose retried FAILED (or one before it in the chain of retries) was contradicted after the retry was made
   * (the send guard's `retry_refuted`): CANCELLED, never sent (cause `retry_refuted`, naming what it retries), and the
   * execution moves on.
   */
  private async refuseRefutedRetry(op: OperationEntity): Promise<void> {
    const moved = await this.transitions.operation(this.db.manager, {
      operation: snapshotOf(op),
      to: S.CANCELLED,
      actor: 'system',
      eventData: refutedRetryCancel(op.retryOf),
    });
    if (!moved.won) return;
    await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: op.executionId });
  }

  /**
   * The send guard refused a send because another of the tenant's operations naming its `resend_ref` was sent and is
   * not settled: CANCELLED, never sent (cause `reference_unsettled`, naming that operation), and the execution moves on.
   * Not left PREPARED: nothing would wake it when the other one settles, and the agent should hear at once, as at intake.
   */
  private async refuseUnsettledReference(op: OperationEntity): Promise<void> {
    const unsettled = await findUnsettledResend(this.db.manager, op);
    const detail = unsettled
      ? `another send of its ${op.connector} reference, operation ${unsettled.operationId} ("${unsettled.key}" of ` +
        `${unsettled.executionId}), is ${unsettled.status}: it may have made the effect, so this one was not sent`
      : `another send of its ${op.connector} reference was not settled: it may have made the effect, so this one was not sent`;
    const data = {
      cause: REFERENCE_UNSETTLED,
      detail,
      ...(unsettled && {
        unsettled: {
          operation_id: unsettled.operationId,
          execution_id: unsettled.executionId,
          key: unsettled.key,
          status: unsettled.status,
        },
      }),
    };
    const moved = await this.transitions.operation(this.db.manager, {
      operation: snapshotOf(op),
      to: S.CANCELLED,
      actor: 'system',
      eventData: data,
    });
    if (!moved.won) return;
    await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: op.executionId });
  }

  /**
   * A dispatch the send guard refused (or that found its operation moved on): nothing was sent and nothing changed.
   * A stable log line and a counter per reason (verity_dispatch_refused_total on this dispatcher's /metrics), so stray
   * or hand-made jobs are visible.
   */
  private refused(op: OperationEntity, reasons: SendRefusal[]): SendReport {
    this.logger.warn(
      { operationId: op.id, executionId: op.executionId, status: op.status, reasons },
      'dispatch refused by the send guard',
    );
    for (const reason of reasons) dispatchRefused.inc({ reason });
    return {
      outcome: `skipped: refused by the send guard (${reasons.join(', ')})`,
      written: null,
      refusals: reasons,
    };
  }

  /**
   * A refusal by the SENT statement's guard. A reviewer's release that can no longer be carried out (its execution
   * ended, a dependency is not done, an approval it needs is not held) is withdrawn. A refusal for an approval that is owed — the tenant's policy asks for
   * it, e.g. by a rule added while a dispatch job prepared the send — moves the execution on, as a send would: the
   * lifecycle is what asks for the approval. (A refusal for a stale read is tried again first, from a fresh read.)
   */
  private async refusedByGuard(
    op: OperationEntity,
    reasons: SendRefusal[],
    options: SendOptions,
    release: boolean,
  ): Promise<SendReport> {
    const report = this.refused(op, reasons);
    if (release && withdrawsRelease(reasons)) {
      // Recorded but no longer possible: withdrawn, with an event, so a reviewer decides again (else it would stay
      // recorded, never sent, and no other resolution would be accepted).
      const resolution = (op.obligation as { resolution?: { at?: string } } | null)?.resolution ?? null;
      await this.transitions.annotate(this.db.manager, {
        executionId: op.executionId,
        operationId: op.id,
        whileStatus: S.MANUAL_REVIEW,
        withdrawRelease: true,
        // The release found refused, not one recorded since (withdrawn by another sender, then released again with a
        // fresh grant): that one is sent, or judged by its own sender.
        whileReleaseAt: resolution?.at ?? null,
        type: 'operation.release_withdrawn',
        data: { reasons, resolution },
      });
    }
    if (!release && reasons.includes('retry_refuted')) {
      // The FAILED it retries was contradicted since the retry was made: it is never sent, whatever else refused it
      // (no later read or decision can make it safe again), and says why; the execution moves on.
      await this.refuseRefutedRetry(op);
      return report;
    }
    if (!release && reasons.includes('approval_key_revoked') && op.approval?.state === 'granted') {
      // The key that granted the approval was revoked after this sender judged the grant, before the send: withdrawn
      // and asked for again, as the check before the send would have done (nothing else would ask: the row says granted).
      await this.withdrawGrant(op, op.approval, 'approval.stale_authority', op.approval.baseline, 'key_revoked');
      return report;
    }
    if (!release && reasons.length > 0 && reasons.every((r) => r === 'reference_unsettled')) {
      // Another send of its reference went out and is not settled: this one is never sent (it could make the effect
      // twice) and says so, as intake refuses it; the agent decides (retry once that one settles).
      await this.refuseUnsettledReference(op);
      return report;
    }
    if (options.advanceAfter && reasons.includes('approval_not_granted') && !preparedFromStaleRead(reasons)) {
      await this.advanceExecution(op.executionId);
    }
    return report;
  }

  /**
   * The provider acknowledged a send the sweeper had already marked UNKNOWN (this dispatcher held the call past its job's
   * lock). The status stays the reconciler's to settle, but what the provider said is recorded — `acknowledged_at` and
   * its reference, with an `operation.acknowledged_late` event — so no read that misses the effect is taken as proof
   * that nothing happened (the FAILED statement checks it), and a read by the provider's id can find it. While its
   * outcome is still to be decided (`LATE_ACKNOWLEDGEMENT_STATUSES`, tried as `LATE_ACKNOWLEDGEMENT_TRIES`), also by a person: an operation that cannot be read
   * back is held for one at once, usually before the 2xx comes back, and a person's FAILED must then be refused (I14).
   * And on a FAILED one (a person decided before the 2xx came back): FAILED stays, but a retry is refused.
   */
  private async recordLateAcknowledgement(op: OperationEntity, providerRef: Record<string, unknown>): Promise<void> {
    // What a person may do with a hold is worked out from the row whenever it is shown (acknowledged_at takes FAILED
    // off), so the list stored when the hold was written needs no rewrite here.
    await this.recordLateAnswer(op, LATE_ACKNOWLEDGEMENT_TRIES, (only) => ({
      patch: { acknowledged_at: 'now', provider_ref: providerRef },
      type: 'operation.acknowledged_late',
      data: {
        detail: 'the provider acknowledged the send after it was marked UNKNOWN',
        // On a FAILED operation: the provider's word refutes the record (which stays, final; a retry is refused).
        ...(only === S.FAILED ? { after: S.FAILED } : {}),
      },
    }));
  }

  /**
   * The send failed explicitly (the provider rejected it, or the connector refused it before any call) after the
   * sweeper had already marked it UNKNOWN: the status stays with whoever decides it now, but the answer is recorded —
   * on the operation (`rejected_at`, `rejection`: what the connector classified, never a body) and as an
   * `operation.rejected_late` event, by one statement (`LATE_REJECTION_TRIES`) — so a person's VERIFIED is refused
   * while it is held (also one decided between its read and its write: the decision's statement checks it), and a
   * VERIFIED it comes after no longer reads as committed (event `after: "VERIFIED"`).
   */
  private async recordLateRejection(
    op: OperationEntity,
    outcome: Extract<SendOutcome, { status: OperationStatus.FAILED }>,
  ) {
    const rejection = {
      reason: outcome.reason,
      detail: outcome.detail,
      ...(outcome.providerError !== undefined && { provider_error: outcome.providerError }),
      ...(outcome.refused && { cause: outcome.refused.cause, refusal: outcome.refused.rule }),
    };
    const recorded = await this.recordLateAnswer(op, LATE_REJECTION_TRIES, (only) => ({
      patch: { rejected_at: 'now', rejection },
      type: 'operation.rejected_late',
      // On a VERIFIED operation: the provider's word contradicts the record (which stays, final; commit unknown).
      data: { ...rejection, ...(only === S.VERIFIED ? { after: S.VERIFIED } : {}) },
    }));
    if (recorded) return;
    this.logger.warn(
      { operationId: op.id, rejection },
      'late rejection not recorded on the operation: it is no longer in a status that takes one',
    );
  }

  /**
   * Records an answer that came back after the send was marked UNKNOWN, by the first of `tries` (statuses the operation
   * may be in by now, in the order it moves through them) whose compare-and-set holds; `annotation` is told the status
   * when a try names only one. False when the operation is in none of them any more. An answer that contradicts a
   * final status (a 2xx after FAILED, a rejection after VERIFIED) changes what the execution's criteria may conclude:
   * the execution is advanced, which judges them again (also after it ended).
   */
  private async recordLateAnswer(
    op: OperationEntity,
    tries: readonly (readonly OperationStatus[])[],
    annotation: (only: OperationStatus | null) => Pick<AnnotationInput, 'patch' | 'type' | 'data'>,
  ): Promise<boolean> {
    for (const whileStatus of tries) {
      const only = whileStatus.length === 1 ? whileStatus[0] : null;
      // Written durably too: this answer is also known nowhere else.
      const recorded = await this.writeAnswer(op, (eventId) =>
        this.transitions.annotate(this.db.manager, {
          eventId,
          executionId: op.executionId,
          operationId: op.id,
          whileStatus,
          ...annotation(only),
        }),
      );
      if (!recorded.won) continue;
      if (only !== null && isTerminalOperation(only)) await this.advanceExecution(op.executionId);
      // A 2xx after FAILED refutes the word every retry of it was made on: those not sent yet are cancelled now
      // (retry_refuted), not when their send is next tried — one waiting for an approval is no longer shown to reviewers.
      if (only === S.FAILED) await advanceRetriesOf(this.db.manager, this.producer, this.logger, op);
      return true;
    }
    return false;
  }

  /** On SIGTERM, before the workers wait for their jobs: an answer's write is no longer tried again (bounded drain). */
  onModuleDestroy(): void {
    this.stopping = true;
  }

  /** Graceful SIGTERM: let in-flight sends finish and record their outcome. */
  async drain(): Promise<void> {
    await Promise.allSettled([...this.inFlight]);
  }
}
