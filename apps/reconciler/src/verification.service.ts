import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import {
  Connector,
  ConnectorOperation,
  ObservationResult,
  ReadBackResult,
  TenantConnectors,
  operationCapabilities,
  readBackThrew,
  readBackUnbound,
  unreachableRead,
} from '@verity/connectors';
import {
  OperationEntity,
  TransitionService,
  Queryable,
  TransitionResult,
  type RecheckRequestShown,
  claimRecheckRequest,
  unusedRecheckRequest,
  withinTransaction,
  findTenant,
  connectorOperation,
  DatabaseNowPlus,
  findOperationForWorker,
  findOperationWithClockForWorker,
  recoveryObligation,
  absenceEvidenceOf,
  findEffectShownBefore,
  postponeRecheck,
  scheduleNextCheck,
  snapshotOf,
  settledByReadBack,
} from '@verity/persistence';
import { LOGGER, Logger, VERITY_CONFIG, VerityConfig, callTimings, testPause } from '@verity/platform';
import { JobName, JobProducer, jobId, advanceRetriesOf, scheduledRecheckJobId } from '@verity/queues';
import {
  HOLDS_WITH_A_RECORD_ON_FILE,
  OperationStatus,
  RECONCILE_OWED_STATUSES,
  ReadBackDecision,
  type RecheckBackoff,
  TerminalReason,
  VerificationMethod,
  decideReadBack,
  decideReconcileStart,
  type ReconcileStart,
  everSent,
  operationTransitionRule,
  readShowsTheEffect,
  recheckDelayMs,
  unreadRecheckDelayMs,
} from '@verity/status-model';
import { DataSource } from 'typeorm';

/** A re-check's write not made: the reviewer's request it would be made for was used by another run of its job. */
const REQUEST_USED = Symbol('request used');
class RequestUsed extends Error {}
/** Undoes a claim whose write did not happen (lost its compare-and-set), carrying the write's answer out. */
class NotWritten extends Error {
  constructor(readonly result: TransitionResult) {
    super('not written');
  }
}

export type VerifyOutcome =
  'verified' | 'held' | 'unknown' | 'rescheduled' | 'failed' | 'skipped: already settled' | 'skipped: lost race';

export type RecheckOutcome =
  | 'verified'
  | `still held: ${ReadBackResult['kind']}`
  | 'skipped: not held'
  | 'skipped: cannot read back'
  | 'skipped: no recorded request'
  | 'skipped: superseded'
  | 'skipped: lost race';

export type ObserveOutcome =
  | 'observed: unchanged'
  | `observed: ${ObservationResult['observation']}`
  | 'skipped: not VERIFIED'
  | 'skipped: lost race';

const S = OperationStatus;
const R = TerminalReason;

/** The evidence of an UNKNOWN held before any read (decideReconcileStart), by why. */
const RECONCILE_HOLD_EVIDENCE: Record<
  Extract<ReconcileStart, { kind: 'hold' }>['why'],
  (connector: string) => Record<string, unknown>
> = {
  'no read-back': (connector) => ({
    method: 'none',
    detail: `${connector} cannot read back; the outcome can only be established outside Verity`,
  }),
  'not verified': () => ({
    method: 'none',
    detail: 'no verification method was asked for (verification_method ""): a read cannot settle it; a person does',
  }),
  deadline: () => ({ method: 'read_after_write', detail: 'reconciliation deadline passed' }),
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
    private readonly connectors: TenantConnectors,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  /**
   * Absence is proof only once any call that could have been made has landed and the source shows it, judged at the
   * moment the read began (a read that began earlier may have missed a landing), on the database's clock, which the
   * bound's times are on: that moment is the database's now less the time since the read began.
   */
  private async absenceProven(op: OperationEntity, readStartedAt: number): Promise<boolean> {
    const { evidentAt, databaseNow } = await absenceEvidenceOf(this.db.manager, op, callTimings(this.config));
    return databaseNow.getTime() - (Date.now() - readStartedAt) >= evidentAt.getTime();
  }

  async verify(operationId: string): Promise<VerifyOutcome> {
    const found = await findOperationWithClockForWorker(this.db.manager, operationId);
    const op = found?.operation;
    if (!op || op.status !== S.ACKNOWLEDGED || op.verificationMethod !== VerificationMethod.READ_AFTER_WRITE) {
      return 'skipped: already settled';
    }
    const { clockOffsetMs } = found;
    // On the database's clock, as acknowledged_at is.
    const readStartedAt = Date.now() + clockOffsetMs;
    const read = await this.readBack(op);
    const decision = decideReadBack({
      status: S.ACKNOWLEDGED,
      read: read.kind,
      // Never a "did not happen" verdict inside the settle window (counted to when the read began): the provider may
      // simply not show it yet.
      absenceIsProof:
        read.kind === 'absent' &&
        readStartedAt - (op.acknowledgedAt ?? op.updatedAt).getTime() >= this.config.SETTLE_WINDOW_MS,
      acknowledged: true,
      checksBefore: op.checkCount,
      budget: this.config.RECONCILE_BUDGET,
      // Verification never concludes FAILED (an absence there only hands the operation to reconciliation).
      sourceProvesAbsence: false,
    });
    return this.carryOut(op, read, decision, JobName.VERIFY_OPERATION, clockOffsetMs);
  }

  async reconcile(operationId: string): Promise<VerifyOutcome> {
    const found = await findOperationWithClockForWorker(this.db.manager, operationId);
    if (!found || !RECONCILE_OWED_STATUSES.includes(found.operation.status)) return 'skipped: already settled';
    let op = found.operation;
    // sent_at is on the database's clock: its age is measured there, not by a host whose clock may be off.
    const { clockOffsetMs } = found;
    const connector = this.connectors.require(op.connector);
    // Judged before every read of an UNKNOWN; of a RECONCILING one too, for what no read can change (one moved there
    // by an older version that did not hold an unverified operation), though not its deadline, which UNKNOWN judges.
    const start = decideReconcileStart({
      canReadBack: !!connector.readBack && operationCapabilities(connector, op.action, op.params).read_back,
      verificationMethod: op.verificationMethod,
      deadlinePassed:
        op.status === S.UNKNOWN &&
        !!op.sentAt &&
        Date.now() + clockOffsetMs - op.sentAt.getTime() > this.config.RECONCILE_DEADLINE_MS,
    });
    if (start.kind === 'hold') {
      // Nothing can be read back (a connector without read_back), or nothing read may settle it: a human decides.
      // Re-sending could deliver a second message.
      return this.hold(op, start.reason, RECONCILE_HOLD_EVIDENCE[start.why](op.connector), clockOffsetMs);
    }
    if (op.status === S.UNKNOWN) {
      const moved = await this.transitions.operation(this.db.manager, { operation: snapshotOf(op), to: S.RECONCILING });
      if (!moved.won) return 'skipped: lost race';
      op = { ...op, status: S.RECONCILING } as OperationEntity;
    }
    const readStartedAt = Date.now();
    const read = await this.readBack(op);
    const absent = read.kind === 'absent';
    const decision = decideReadBack({
      status: S.RECONCILING,
      read: read.kind,
      absenceIsProof: absent && (await this.absenceProven(op, readStartedAt)),
      acknowledged: op.acknowledgedAt !== null,
      checksBefore: op.checkCount,
      budget: this.config.RECONCILE_BUDGET,
      sourceProvesAbsence: connector.readBackProvesAbsence === true,
      // A source that showed the record on an earlier read and answers "not there" now lost it, or flaps.
      effectShownBefore: absent && (await findEffectShownBefore(this.db.manager, op)) !== null,
    });
    return this.carryOut(op, read, decision, JobName.RECONCILE_OPERATION, clockOffsetMs);
  }

  /** Carries out what the status model decided of a read (decideReadBack): the moves, the evidence, the next job. */
  private async carryOut(
    op: OperationEntity,
    read: ReadBackResult,
    decision: ReadBackDecision,
    job: JobName.VERIFY_OPERATION | JobName.RECONCILE_OPERATION,
    /** How far the database's clock is ahead of this process', measured at the read of `op`. */
    clockOffsetMs: number,
  ): Promise<VerifyOutcome> {
    // What the read concludes is written only while the operation is still at the check it was read at: a duplicate run
    // of the job (the sweeper re-enqueued a read that took long) whose read ends after newer ones, with the operation
    // back in the status it read (RECONCILING → UNKNOWN → RECONCILING), must not settle it on its older read.
    const readAt = op.checkCount;
    switch (decision.kind) {
      case 'verified':
        return this.settle(
          op,
          S.VERIFIED,
          null,
          { method: 'read_after_write', ...read.evidence },
          'verified',
          undefined,
          readAt,
        );
      case 'failed': {
        const since = Date.now() + clockOffsetMs - (op.sentAt ?? op.createdAt).getTime();
        return this.settle(
          op,
          S.FAILED,
          decision.reason,
          { method: 'read_after_write', ...read.evidence, found: false, proven_absent_after_ms: since },
          'failed',
          undefined,
          readAt,
        );
      }
      case 'hold':
        return this.hold(
          op,
          decision.reason,
          read.kind === 'mismatch'
            ? { method: 'read_after_write', mismatched: read.fields, ...read.evidence }
            : { method: 'read_after_write', ...read.evidence, checks: op.checkCount + 1 },
          clockOffsetMs,
          readAt,
        );
      case 'unknown':
        return this.acknowledgedButAbsent(op, read);
      case 'unknown-again':
        return this.backToUnknown(
          op,
          read.kind === 'absent' ? { ...read.evidence, found: false } : { ...read.evidence, inconclusive: read.kind },
        );
      case 'read-again':
        return this.reschedule(op, job);
    }
  }

  /** Acknowledged, but not at the source after the settle window: UNKNOWN, and reconciliation takes it from there. */
  private async acknowledgedButAbsent(op: OperationEntity, read: ReadBackResult): Promise<VerifyOutcome> {
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
      { operationId: op.id, executionId: op.executionId },
      { jobId: jobId(JobName.RECONCILE_OPERATION, op.id, 0) },
    );
    return 'unknown';
  }

  private async readBack(op: OperationEntity): Promise<ReadBackResult> {
    const connector = this.connectors.require(op.connector);
    if (this.config.TEST_PAUSE_BEFORE_READ_MS > 0) {
      // Test-only kill point (refused in production): a test waits for this marker and kills the process mid-read.
      await testPause(this.logger, this.config.TEST_PAUSE_BEFORE_READ_MS, 'paused before read-back', {
        operationId: op.id,
      });
    }
    if (!connector.readBack) {
      return unreachableRead(op.connector, 'no read-back');
    }
    try {
      return await connector.readBack(connectorOperation(op), await this.connectors.environmentOf(op));
    } catch (error) {
      this.logger.error({ err: error, operationId: op.id }, 'read-back threw');
      return readBackThrew(op.connector, error);
    }
  }

  private async backToUnknown(op: OperationEntity, evidence: Record<string, unknown>): Promise<VerifyOutcome> {
    const moved = await this.transitions.operation(this.db.manager, {
      operation: snapshotOf(op),
      to: S.UNKNOWN,
      // Only over the count this read was made at: a redelivered job that finishes after a newer one must not write
      // its older count back (the retry budget would stretch); it lost the race.
      whileCheckCount: op.checkCount,
      // Due by the database's clock, the sweeper's: stamped by the statement, not this host.
      patch: { check_count: op.checkCount + 1, next_check_at: new DatabaseNowPlus(this.backoff(op.checkCount + 1)) },
      eventData: { detail: 'inconclusive read; scheduled again', evidence },
    });
    if (!moved.won) return 'skipped: lost race';
    await this.producer.tryEnqueue(
      JobName.RECONCILE_OPERATION,
      { operationId: op.id, executionId: op.executionId },
      { jobId: jobId(JobName.RECONCILE_OPERATION, op.id, op.checkCount + 1), delay: this.backoff(op.checkCount + 1) },
    );
    return 'rescheduled';
  }

  private async reschedule(op: OperationEntity, job: JobName.VERIFY_OPERATION | JobName.RECONCILE_OPERATION) {
    const checks = op.checkCount + 1;
    await scheduleNextCheck(this.db.manager, op, this.backoff(checks));
    await this.producer.tryEnqueue(
      job,
      { operationId: op.id, executionId: op.executionId },
      { jobId: jobId(job, op.id, checks), delay: this.backoff(checks) },
    );
    return 'rescheduled' as const;
  }

  private backoff(checks: number): number {
    return Math.min(this.config.READ_BACKOFF_MAX_MS, this.config.READ_BACKOFF_MS * 2 ** Math.max(0, checks - 1));
  }

  private async settle(
    op: OperationEntity,
    to: OperationStatus.VERIFIED | OperationStatus.FAILED,
    reason: TerminalReason | null,
    evidence: Record<string, unknown>,
    outcome: VerifyOutcome,
    /** A reviewer's re-check request, claimed with the write (writeClaiming). */
    requestId?: string,
    /** Written only while `check_count` is still this: the check the read was made at (see carryOut). */
    whileCheckCount?: number,
  ): Promise<VerifyOutcome> {
    const connector = this.connectors.require(op.connector);
    const move = (db: Queryable, shown: Record<string, unknown>) =>
      this.transitions.operation(db, {
        operation: snapshotOf(op),
        to,
        reason,
        whileCheckCount,
        // A read-back that does not name its effect verifies only while the tenant has not bound read-backs: the read
        // was made under settings read before it, and an admin may have bound them since.
        readBackUnbound: to === S.VERIFIED && readBackUnbound(connector, op.action, op.params) ? true : undefined,
        patch: settledByReadBack(to, reason, shown, this.config),
        eventData: { evidence_source: shown.source },
      });
    let moved = await this.writeClaiming(requestId, op.id, (db) => move(db, evidence));
    // The job ran twice at once and the other run used the request, writing what its own read found: this read found
    // the effect, which is never dropped for that. The move is made without the request, saying so; its
    // compare-and-set lets it be made once (by a third run, or over the other run's own VERIFIED, it is refused).
    if (moved === REQUEST_USED) moved = await move(this.db.manager, asDuplicateRun(evidence));
    if (!moved.won) return 'skipped: lost race';
    await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: op.executionId });
    return outcome;
  }

  /**
   * Observation after VERIFIED (docs/semantics.md): read the effect again and record what is observable now —
   * converged, superseded, degraded or unavailable — as `observation`, with an `operation.observed` event when it
   * changes. Only while the operation is VERIFIED; its status, terminal reason and evidence stay as they ended.
   * Written only while the row is still the one this job looked at before its read (whileUpdatedAt): two jobs' reads
   * may overlap (a slow read, a job run twice), and one that ends after another wrote writes nothing — neither its
   * older observation back over the newer one's (also when a third read wrote back the value this one looked at), nor
   * a second `operation.observed` of the same change.
   */
  async observe(operationId: string): Promise<ObserveOutcome> {
    // With the database's clock, in the same read: a read that could not be made is dated on it (observeThrough).
    const found = await findOperationWithClockForWorker(this.db.manager, operationId);
    const op = found?.operation;
    if (!op || op.status !== S.VERIFIED) return 'skipped: not VERIFIED';
    const connector = this.connectors.require(op.connector);
    const result = await this.observeThrough(connector, connectorOperation(op), op, found.clockOffsetMs);
    if (result.observation === op.observation) return 'observed: unchanged';
    const annotated = await this.transitions.annotate(this.db.manager, {
      executionId: op.executionId,
      operationId: op.id,
      whileStatus: S.VERIFIED,
      whileUpdatedAt: op.updatedAt,
      patch: { observation: result.observation },
      type: 'operation.observed',
      data: {
        observation: result.observation,
        previous: op.observation,
        detail: result.detail,
        evidence: result.evidence,
      },
    });
    // Lost: no longer VERIFIED, or observed by another job since this one's look.
    return annotated.won ? `observed: ${result.observation}` : 'skipped: lost race';
  }

  private async observeThrough(
    connector: Connector,
    operation: ConnectorOperation,
    op: OperationEntity,
    /** The database's clock less this process', measured at the read of `op`. */
    clockOffsetMs: number,
  ): Promise<ObservationResult> {
    const verified = (op.evidence?.record ?? null) as Record<string, unknown> | null;
    try {
      const env = await this.connectors.environmentOf(op);
      if (connector.observe) return await connector.observe(operation, verified, env);
      if (connector.readBack) {
        const read = await connector.readBack(operation, env);
        if (read.kind === 'found')
          return { observation: 'converged', detail: 'read back as verified', evidence: read.evidence };
        if (read.kind === 'unreachable') {
          return { observation: 'unavailable', detail: 'the source cannot be read', evidence: read.evidence };
        }
        return { observation: 'degraded', detail: `read back: ${read.kind}`, evidence: read.evidence };
      }
    } catch (error) {
      this.logger.error({ err: error, operationId: op.id }, 'observation read threw');
    }
    return {
      observation: 'unavailable',
      detail: 'the source cannot be read',
      // Shown beside times the database stamped (the operation's, its events'): dated on the same clock.
      evidence: { source: op.connector, read_at: databaseNowIso(clockOffsetMs) },
    };
  }

  /**
   * A held operation's source read again (never a send), on schedule or because a reviewer asked. If the hold is one
   * the status model lets the system release (the source was unreachable or lagging) and the effect is there now,
   * it is VERIFIED with the read-back as evidence. Anything else stays held for a person — an absence included: a
   * hold is no place for the system to conclude "did not happen" — with an `operation.rechecked` event, and the next
   * automatic read is scheduled while the source may still answer and the obligation is not yet due.
   * `requestId`: a reviewer's request as the API recorded it. The reviewer it names is the one the record gives, and it is
   * used once, with the write of what the read found (writeClaiming); a job naming no recorded request of this
   * operation, or one used already (replayed, or its data edited on a writable Bull Board) or made for an earlier hold
   * (libs/persistence `unusedRecheckRequest`), reads nothing and writes nothing in anyone's name. A request has no
   * maximum age: a job run late (reconcilers down, a backed-up queue) still reads, its events saying when the reviewer
   * asked (`requested_at`) beside who (`requested_by`), so a late read is plain as one.
   * `dueAt`: a scheduled re-check's due time. It runs only while the operation's `next_check_at` still names it, checked
   * before the read and in the statement that writes: every read that leaves the hold held schedules the next one and
   * re-dates `next_check_at`, so a re-check it superseded (the one scheduled before a reviewer's read, or a "still
   * unknown") reads nothing and writes nothing — else each reviewer's read started another chain of automatic reads.
   * One superseded while it read whose read showed the effect writes that, neither counted as a re-check of the chain
   * nor setting its schedule. A reviewer's re-check is never superseded. The sweeper re-arms a lost scheduled re-check
   * with the due time it was armed for; a job with neither (enqueued by an older version) runs for whatever is owed.
   * A reviewer's job run twice at once (BullMQ's stalled-job recovery, two reconcilers) reads twice: the run that writes
   * first uses the request; the other writes nothing more in the reviewer's name unless its read showed the effect and
   * the record lacks it (VERIFIED, `effect_shown`, `effect_shown_after_failed`), marked `duplicate_run`. That mark
   * means the request, unused at the run's look before its read, could not be claimed when it wrote (REQUEST_USED): the
   * other run used it, or — rarely, and marked the same — it was pruned or its hold's attempt ended meanwhile.
   */
  async recheck(operationId: string, requestId?: string, dueAt?: unknown): Promise<RecheckOutcome> {
    const found = await findOperationWithClockForWorker(this.db.manager, operationId);
    const op = found?.operation;
    // The next read is scheduled on the database's clock, the obligation's due time's and the sweeper's.
    const clockOffsetMs = found?.clockOffsetMs ?? 0;
    if (!op || op.status !== S.MANUAL_REVIEW || (op.obligation as { resolution?: unknown } | null)?.resolution) {
      await this.postponeUnread(op, requestId, dueAt, clockOffsetMs);
      if (op && typeof requestId === 'string') await this.answerUnread(op, requestId);
      return 'skipped: not held';
    }
    const unreadable = !everSent(op) ? 'never_sent' : this.whyCannotReadBack(op);
    if (unreadable) {
      await this.postponeUnread(op, requestId, dueAt, clockOffsetMs);
      if (typeof requestId === 'string') await this.answerCannotRead(op, requestId, unreadable);
      return 'skipped: cannot read back';
    }
    // (A due time that is no time — a job's data edited on a writable Bull Board — names no re-check the row owes.)
    const scheduledFor =
      requestId === undefined && dueAt !== undefined
        ? new Date(typeof dueAt === 'string' ? Date.parse(dueAt) : NaN)
        : undefined;
    // (At the millisecond, as the statement's guard compares it: the driver reads the row's time without what is finer.)
    if (scheduledFor && op.nextCheckAt?.getTime() !== scheduledFor.getTime()) return 'skipped: superseded';
    const request =
      requestId === undefined
        ? undefined
        : typeof requestId === 'string'
          ? await unusedRecheckRequest(this.db.manager, requestId, op.id)
          : null;
    if (request === null) {
      // Never recorded for this operation, used already, or made for an earlier hold of it.
      this.logger.warn({ operationId: op.id, requestId }, 're-check job names no usable recorded request: skipped');
      return 'skipped: no recorded request';
    }
    const read = await this.readBack(op);
    const trigger = request ? reviewerTrigger(request) : { trigger: 'scheduled' };
    // Only an operation verified by read-back can be VERIFIED by a read (with no verification method, a person's).
    const verifies = op.verificationMethod === VerificationMethod.READ_AFTER_WRITE;
    let held = op;
    if (read.kind === 'found' && verifies && systemMayRelease(op.terminalReason)) {
      const moved = await this.settle(
        op,
        S.VERIFIED,
        null,
        { method: 'read_after_write', ...read.evidence, recheck: { ...trigger, held_for: op.terminalReason } },
        'verified',
        requestId,
      );
      if (moved === 'verified') return 'verified';
      // The VERIFIED was refused. Decided by a reviewer meanwhile: what the read found is written onto a FAILED.
      // Still held — the tenant bound read-backs while the read was made, so this one does not count — the re-check
      // did not conclude, and is recorded as such below (its event, what it showed, the request used): dropped, the
      // reviewer's request vanished with no word of it and the hold lost the effect the source had just shown.
      const now = await findOperationForWorker(this.db.manager, op.id);
      if (now?.status !== S.MANUAL_REVIEW) {
        if (!(await this.recordEffectFoundAfterFailed(op, read, trigger, clockOffsetMs, requestId))) {
          await this.recordDecidedMeanwhile(op, read, trigger, requestId);
        }
        return 'skipped: lost race';
      }
      held = now;
    }
    // The source answered with something a person must judge (another amount, a missing field): reading again
    // cannot change that. Otherwise it may still answer, or still show the effect late.
    const mayChange = read.kind === 'unreachable' || read.kind === 'stale' || read.kind === 'absent';
    // The count and the next read follow from the obligation as it stands when this read is written: a reviewer's
    // "still unknown" recorded meanwhile re-dated it and restarted the count, so the write is made only while the due
    // time is the one it was computed from (compare-and-set), and computed again from the row if that changed.
    // A scheduled re-check another read superseded while this one read (see below): what it showed is written, with
    // nothing scheduled from it — the next automatic read is the one the operation names.
    let superseded = false;
    for (let attempt = 1; ; attempt += 1) {
      // Which re-check this is as read: its backoff. The stored count is added to in the
      // statement (countInObligation), so a reviewer's re-check racing a scheduled one counts both.
      const rechecks = (held.obligation?.rechecks ?? 0) + 1;
      const next =
        mayChange && systemMayRelease(held.terminalReason) ? this.nextRecheckAt(held, rechecks, clockOffsetMs) : null;
      // What the source showed is kept on the hold, not only in the history: a person's FAILED is refused since, also
      // one whose own read comes after this one and finds nothing (a lagging or flapping source), or races it.
      const shown =
        readShowsTheEffect(read.kind) && !held.obligation?.effect_shown
          ? { effect_shown: effectShown(read, clockOffsetMs) }
          : {};
      const annotated = await this.writeClaiming(requestId, held.id, (db) =>
        this.transitions.annotate(db, {
          executionId: held.executionId,
          operationId: held.id,
          whileStatus: S.MANUAL_REVIEW,
          // (The last try writes whatever the due time: what the read found is never dropped for a re-dating.)
          whileObligationDueAt: attempt < 3 ? held.obligation?.due_at : undefined,
          whileNextCheckAt: superseded ? undefined : scheduledFor,
          patch: superseded ? undefined : { next_check_at: next },
          merge: { obligation: shown },
          // A superseded read is no re-check of the chain the row names now (after a "still unknown", one whose count
          // restarted): counted, it stretched that chain's backoff. What it showed is kept; the count is the chain's.
          countInObligation: superseded ? undefined : 'rechecks',
          type: 'operation.rechecked',
          // A superseded read's next_check_at is the statement's (reportNextCheckAt).
          data: recheckedData(
            trigger,
            read,
            held.terminalReason,
            superseded ? { superseded: true } : { next_check_at: next?.toISOString() ?? null },
          ),
          // Written whatever the due time is then (not guarded by it): the one in force as the statement leaves the
          // row, not the one a look before it read — a re-dating may commit in between.
          reportNextCheckAt: superseded || undefined,
        }),
      );
      // The job ran twice at once and the other run wrote the request's event: nothing more in the reviewer's name,
      // unless this read showed the effect and the record lacks it — on the hold (the other read did not show it), or,
      // the hold resolved FAILED since, as the FAILED's refutation (recordEffectFoundAfterFailed, written once).
      if (annotated === REQUEST_USED) {
        if (!readShowsTheEffect(read.kind)) return 'skipped: no recorded request';
        if (await this.keepEffectShown(held, read, trigger, clockOffsetMs)) return `still held: ${read.kind}`;
        if ((await findOperationForWorker(this.db.manager, op.id))?.status === S.MANUAL_REVIEW) {
          return 'skipped: no recorded request';
        }
        break;
      }
      if (annotated.won) {
        if (next && !superseded) await this.scheduleRecheck(held, next, clockOffsetMs);
        return `still held: ${read.kind}`;
      }
      const now = await findOperationForWorker(this.db.manager, op.id);
      // Another read (or a "still unknown") re-dated the next re-check while this one read: the next automatic read is
      // the one it named, not one from here. What this read found is dropped only if it showed nothing of the effect —
      // one that did is kept on the hold (a person's FAILED is refused by it), never lost for a re-dating.
      if (
        scheduledFor &&
        !superseded &&
        now?.status === S.MANUAL_REVIEW &&
        now.nextCheckAt?.getTime() !== scheduledFor.getTime()
      ) {
        if (!readShowsTheEffect(read.kind)) return 'skipped: superseded';
        superseded = true;
        held = now;
        continue;
      }
      const redated =
        now?.status === S.MANUAL_REVIEW && now.obligation?.due_at !== held.obligation?.due_at && attempt < 3;
      if (!redated) break;
      held = now;
    }
    // A reviewer decided while this read was made; if they wrote FAILED, what it found must not be dropped. A reviewer's
    // read that is no such refutation is still recorded in their name, its request used (recordDecidedMeanwhile).
    if (
      !readShowsTheEffect(read.kind) ||
      !(await this.recordEffectFoundAfterFailed(op, read, trigger, clockOffsetMs, requestId))
    ) {
      await this.recordDecidedMeanwhile(op, read, trigger, requestId);
    }
    return 'skipped: lost race';
  }

  /**
   * `write`, with the reviewer's re-check request (when the re-check is one) claimed in its transaction: the request is
   * used exactly when what its read found is written. A write that did not happen (it lost its compare-and-set) gives
   * the request back, as does an attempt that fails (a lost connection, a deadlock, a stop): the job's next attempt
   * still writes in the reviewer's name. A request used meanwhile (the job ran twice) writes nothing: REQUEST_USED (its
   * caller still writes a read that showed the effect, without the request, guarded to be written once).
   */
  private async writeClaiming(
    requestId: string | undefined,
    operationId: string,
    write: (db: Queryable) => Promise<TransitionResult>,
  ): Promise<TransitionResult | typeof REQUEST_USED> {
    if (requestId === undefined) return write(this.db.manager);
    try {
      return await withinTransaction(this.db.manager, async (tx) => {
        if ((await claimRecheckRequest(tx, requestId, operationId)) === null) throw new RequestUsed();
        const written = await write(tx);
        if (!written.won) throw new NotWritten(written);
        return written;
      });
    } catch (error) {
      if (error instanceof RequestUsed) return REQUEST_USED;
      if (error instanceof NotWritten) return error.result;
      throw error;
    }
  }

  /**
   * The re-check's read showed the effect (found, or a record of it with another amount or without its status field),
   * but a reviewer's decision came first. Had it been FAILED, the record would say "did not happen" of an effect the
   * source has just shown: the read is written into its history (only while the operation is still FAILED, and only
   * while the FAILED has no such read on record yet) for the people who audit it, never dropped, and logged as a
   * warning. Whether the read needs no other record: false only for a reviewer's read none of whose writes was made and
   * whose request is still unused (the operation is not FAILED: decided otherwise), for recordDecidedMeanwhile.
   */
  private async recordEffectFoundAfterFailed(
    op: OperationEntity,
    read: ReadBackResult,
    trigger: Record<string, unknown>,
    /** The database's clock less this process': the record is dated on the clock its FAILED was. */
    clockOffsetMs: number,
    requestId?: string,
  ): Promise<boolean> {
    const record = (db: Queryable, duplicateRun: boolean) =>
      this.transitions.annotate(db, {
        executionId: op.executionId,
        operationId: op.id,
        whileStatus: S.FAILED,
        // Once, by whichever read writes first: a scheduled re-check and a reviewer's that read at once, or two runs of
        // one reviewer's job (see below). The FAILED refuted is one fact — one event, one webhook — however many reads
        // showed it; a scheduled read that finds it on record writes nothing, a reviewer's is recorded in their name
        // beside it, not as a second refutation (see below).
        whileObligationLacks: 'effect_shown_after_failed',
        // On the row too, so every reader of the operation sees the FAILED refuted (its commit, its retry rule).
        merge: { obligation: { effect_shown_after_failed: { result: read.kind, at: databaseNowIso(clockOffsetMs) } } },
        type: 'operation.rechecked',
        data: recheckedData(trigger, read, op.terminalReason, {
          after: S.FAILED,
          ...(duplicateRun && { duplicate_run: true }),
        }),
      });
    let recorded = await this.writeClaiming(requestId, op.id, (db) => record(db, false));
    // Another run of the job (run twice at once) used the request, with what its own read found: this read's effect is
    // written all the same, without the request, unless the FAILED has one on record already (as for any read). (A job
    // run after its request was used reads nothing: it is skipped before its read.)
    let onRecord = true;
    if (recorded === REQUEST_USED) recorded = await record(this.db.manager, true);
    else if (!recorded.won && requestId !== undefined) {
      // Still FAILED with the refutation on record (another read's): the reviewer was answered 202 and promised their
      // read's result as an event, so it is written in their name, the request used — without `after` (the FAILED's
      // refutation is announced once, by the read that wrote it) and changing nothing on the row. Left unwritten, their
      // request stayed unused, with no word of it anywhere, until it was pruned.
      const noted = await this.noteReviewersRead(op, requestId, S.FAILED, trigger, read, {
        refutation_on_record: true,
      });
      // (Used by another run of the job: that run's record is the reviewer's answer.)
      onRecord = noted === REQUEST_USED || noted.won;
    }
    if (recorded.won) {
      this.logger.warn(
        { operationId: op.id, executionId: op.executionId },
        're-check found the effect of an operation a reviewer had just resolved FAILED',
      );
      // The execution's criteria may no longer conclude from that FAILED: the advance judges them again.
      await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: op.executionId });
      // And the word every retry of it was made on no longer stands: those not sent yet are cancelled by their
      // execution's advance (retry_refuted), not when their send is next tried.
      await advanceRetriesOf(this.db.manager, this.producer, this.logger, op);
    }
    return onRecord;
  }

  /**
   * A reviewer's read that could not be written on the hold: the hold was decided while it read (a reviewer's FAILED or
   * VERIFIED, another re-check's release), and the read is no refutation of a FAILED (it showed nothing of the effect,
   * or the operation is not FAILED). The reviewer was answered 202 and promised their read's result as an event: it is
   * written in their name (`operation.rechecked`, what the read found, `decided_meanwhile`: the status the operation
   * is in), the request used in the same transaction (writeClaiming, so a second run of the job writes nothing), while
   * the operation is still in that status. No `after`: nothing is announced, and nothing on the row changes (the
   * decision stands). Left unwritten, the request stayed unused, with no word of it anywhere, until it was pruned.
   */
  private async recordDecidedMeanwhile(
    op: OperationEntity,
    /** Null: no read was made (answerUnread, answerCannotRead). */
    read: ReadBackResult | null,
    trigger: Record<string, unknown>,
    requestId: string | undefined,
  ): Promise<void> {
    if (requestId === undefined) return;
    // A decided status is final; another try only for one that moved on between the look and the write.
    for (let attempt = 1; attempt <= 3; attempt += 1) {
      const now = await findOperationForWorker(this.db.manager, op.id);
      if (!now || now.status === S.MANUAL_REVIEW) return;
      const noted = await this.noteReviewersRead(op, requestId, now.status, trigger, read, {
        decided_meanwhile: now.status,
      });
      if (noted === REQUEST_USED || noted.won) return;
    }
  }

  /**
   * A reviewer's re-check job that starts after its hold was decided (by a reviewer, or by another re-check's release,
   * between the API's 202 and the job's start): nothing is read, but the reviewer was promised the result as an event.
   * It is written in their name as for a read under way when the hold was decided (recordDecidedMeanwhile:
   * `decided_meanwhile`, the request claimed in the same transaction, so two runs of the job write it once; no `after`,
   * nothing on the row changes), with `result` and `evidence` null: no read was made. `held_for` is the hold's reason
   * as its obligation keeps it (the decision wrote its own terminal reason). Nothing for a request that is not usable
   * (used, made for another hold, never recorded), nor while the operation is still in MANUAL_REVIEW with a resolution
   * recorded (a release the dispatcher has yet to carry out): not decided yet, and only a never-sent hold — never
   * re-checked — is released.
   */
  private async answerUnread(op: OperationEntity, requestId: string): Promise<void> {
    if (op.status === S.MANUAL_REVIEW) return;
    const request = await unusedRecheckRequest(this.db.manager, requestId, op.id);
    if (!request) return;
    const heldFor = (op.obligation?.reason as TerminalReason | undefined) ?? op.terminalReason;
    await this.recordDecidedMeanwhile({ ...op, terminalReason: heldFor }, null, reviewerTrigger(request), requestId);
  }

  /**
   * A reviewer's re-check job that finds the hold still open but cannot read it back: the API refuses such a request
   * up front (409 `cannot-read-back`), so its connector changed between the 202 and the job — a reconciler deployed
   * without it (`connector_unavailable`), or with a declaration that no longer reads this operation (`no_read_back`).
   * Nothing is read, but the reviewer was promised the result as an event: it is written in their name with `result`
   * and `evidence` null and `cannot_read_back` (why), while the operation is still held, the request claimed in the
   * same transaction (noteReviewersRead), so two runs of the job write it once and a replay none. Nothing on the row
   * changes but the `updated_at` every annotation stamps: not counted as a re-check, the next one left as it is.
   * Decided between the look and the write: answered as a job that started after the decision (answerUnread).
   * Nothing for a request that is not usable (used, made for another hold, never recorded).
   */
  private async answerCannotRead(op: OperationEntity, requestId: string, why: CannotReadBack): Promise<void> {
    const request = await unusedRecheckRequest(this.db.manager, requestId, op.id);
    if (!request) return;
    const noted = await this.noteReviewersRead(op, requestId, S.MANUAL_REVIEW, reviewerTrigger(request), null, {
      cannot_read_back: why,
    });
    if (noted === REQUEST_USED || noted.won) return;
    const now = await findOperationForWorker(this.db.manager, op.id);
    if (now) await this.answerUnread(now, requestId);
  }

  /**
   * A reviewer's read written in their name beside a decision that stands (after another read's refutation of the
   * FAILED, or after the hold was decided): an `operation.rechecked` event without `after`, written while the operation
   * is still in `whileStatus`, their request used in the same transaction. Nothing on the row changes.
   */
  private noteReviewersRead(
    op: OperationEntity,
    requestId: string,
    whileStatus: OperationEntity['status'],
    trigger: Record<string, unknown>,
    read: ReadBackResult | null,
    more: Record<string, unknown>,
  ): Promise<TransitionResult | typeof REQUEST_USED> {
    return this.writeClaiming(requestId, op.id, (db) =>
      this.transitions.annotate(db, {
        executionId: op.executionId,
        operationId: op.id,
        whileStatus,
        type: 'operation.rechecked',
        data: recheckedData(trigger, read, op.terminalReason, more),
      }),
    );
  }

  /**
   * A reviewer's re-check job run twice at once (BullMQ's stalled-job recovery, two reconcilers): the other run used the
   * request and wrote what its read found, and this run's read showed the effect. That is kept on the hold unless it has
   * an effect on record already (the other read showed it too), by one statement (whileObligationLacks), so two such
   * runs write it once: an event in the reviewer's name saying it is a second run (`duplicate_run`), not counted as a
   * re-check and scheduling nothing (the other run did both), naming the next re-check in force. Whether it was written.
   */
  private async keepEffectShown(
    held: OperationEntity,
    read: ReadBackResult,
    trigger: Record<string, unknown>,
    clockOffsetMs: number,
  ): Promise<boolean> {
    const kept = await this.transitions.annotate(this.db.manager, {
      executionId: held.executionId,
      operationId: held.id,
      whileStatus: S.MANUAL_REVIEW,
      whileObligationLacks: 'effect_shown',
      merge: { obligation: { effect_shown: effectShown(read, clockOffsetMs) } },
      type: 'operation.rechecked',
      data: recheckedData(trigger, read, held.terminalReason, { duplicate_run: true }),
      reportNextCheckAt: true,
    });
    return kept.won;
  }

  /**
   * A scheduled re-check skipped before its read (the hold's connector reads back no more — a deploy without it — or
   * the hold is decided and its `next_check_at` still set): the hold stays owed its re-check, `next_check_at` kept so a
   * deploy that can read again revives the chain, but moved on by compare-and-set on the due time this re-check ran for
   * (libs/persistence `postponeRecheck`). Moved by as long again as the hold has gone unread (since its `updated_at`,
   * which the postponement leaves as it was), at least the chain's backoff (the delay its next read would have) and at
   * most RECHECK_BACKOFF_MAX_MS, and never past the obligation's due time while that is ahead (status model
   * `unreadRecheckDelayMs`): the wait doubles with each consecutive unread
   * re-check. By the chain's backoff alone, whose count of reads does not grow while nothing is read, such a hold was
   * armed and skipped at that one pace for as long as it could not be read. Left overdue, with nothing written, it was
   * re-armed by every sweep and read first in the sweep's batch (oldest first): more such holds than the batch crowded
   * every other owed check out. Nothing is enqueued: the sweeper arms it once overdue. Only the re-check the row names
   * (a reviewer's read is no re-check of the chain; a superseded one's chain is another's).
   */
  private async postponeUnread(
    op: OperationEntity | null | undefined,
    requestId: unknown,
    dueAt: unknown,
    /** The database's clock less this process', measured at the read of `op` (its `updated_at` is on the former). */
    clockOffsetMs: number,
  ): Promise<void> {
    if (requestId !== undefined || !op?.nextCheckAt || op.status !== S.MANUAL_REVIEW) return;
    // (A job of an older version carries no due time: it ran for whatever was owed, the one the row names.)
    const ranFor = dueAt === undefined ? op.nextCheckAt : new Date(typeof dueAt === 'string' ? Date.parse(dueAt) : NaN);
    if (ranFor.getTime() !== op.nextCheckAt.getTime()) return;
    const now = Date.now() + clockOffsetMs;
    const unreadForMs = now - op.updatedAt.getTime();
    // Not past the obligation's due time (on the database's clock, as `updated_at`): a hold that escalates unread.
    const due = op.obligation?.due_at ? Date.parse(op.obligation.due_at) : NaN;
    const dueInMs = Number.isFinite(due) ? due - now : undefined;
    const delay = unreadRecheckDelayMs(
      { rechecks: op.obligation?.rechecks ?? 0, unreadForMs, dueInMs },
      this.recheckBackoff(),
    );
    await postponeRecheck(this.db.manager, op.id, ranFor, delay);
  }

  private canReadBack(op: OperationEntity): boolean {
    return this.whyCannotReadBack(op) === null;
  }

  /**
   * Why this reconciler cannot read the operation back, null when it can: no connector of its name is deployed here,
   * or the connector declares no read of this operation (or has none).
   */
  private whyCannotReadBack(op: OperationEntity): Exclude<CannotReadBack, 'never_sent'> | null {
    const connector = this.connectors.get(op.connector);
    if (!connector) return 'connector_unavailable';
    return connector.readBack && operationCapabilities(connector, op.action, op.params).read_back
      ? null
      : 'no_read_back';
  }

  /**
   * The next automatic re-check, with backoff; none once it would fall after the obligation is due. On the database's
   * clock (`clockOffsetMs`: its lead over this process'), as the due time is and as the sweeper reads `next_check_at`.
   */
  private nextRecheckAt(
    op: { obligation: { due_at?: string } | null },
    rechecks: number,
    clockOffsetMs: number,
  ): Date | null {
    const at = new Date(Date.now() + clockOffsetMs + recheckDelayMs(rechecks, this.recheckBackoff()));
    const due = op.obligation?.due_at ? Date.parse(op.obligation.due_at) : NaN;
    return Number.isFinite(due) && at.getTime() > due ? null : at;
  }

  /** The spacing of a hold's automatic re-checks (status model `recheckDelayMs`, `unreadRecheckDelayMs`). */
  private recheckBackoff(): RecheckBackoff {
    return { backoffMs: this.config.RECHECK_BACKOFF_MS, backoffMaxMs: this.config.RECHECK_BACKOFF_MAX_MS };
  }

  /** `at` is on the database's clock: the delay is counted from the database's now (`clockOffsetMs`). */
  private async scheduleRecheck(op: OperationEntity, at: Date, clockOffsetMs: number): Promise<void> {
    await this.producer.tryEnqueue(
      JobName.RECHECK_OPERATION,
      // The due time it is for: it runs only while the operation's next_check_at still names it.
      { operationId: op.id, executionId: op.executionId, dueAt: at.toISOString() },
      {
        jobId: scheduledRecheckJobId(op.id, at),
        delay: Math.max(0, at.getTime() - (Date.now() + clockOffsetMs)),
      },
    );
  }

  /** MANUAL_REVIEW always carries its recovery obligation. */
  private async hold(
    op: OperationEntity,
    reason: TerminalReason,
    evidence: Record<string, unknown>,
    /** The database's clock less this process', measured at the read of `op`: the due time is on the former. */
    clockOffsetMs: number,
    /** Written only while `check_count` is still this: the check the read was made at (see carryOut). */
    whileCheckCount?: number,
  ): Promise<VerifyOutcome> {
    const tenant = await findTenant(this.db.manager, op.tenantId);
    const obligation = recoveryObligation({
      reason,
      everSent: everSent(op),
      acknowledged: op.acknowledgedAt !== null,
      rejected: Boolean(op.rejectedAt),
      // A read made while it was reconciled showed the record: kept on the hold, so a person's "did not happen" is
      // refused whatever a later read of a source that lost it, or flaps, shows. (A hold for what such a read found
      // keeps that read as its evidence already.)
      effectShown:
        everSent(op) && !HOLDS_WITH_A_RECORD_ON_FILE.includes(reason)
          ? await findEffectShownBefore(this.db.manager, op)
          : null,
      settings: tenant?.settings,
      // By the database's clock, the one the sweeper finds it overdue by: a host behind by more than the due time
      // wrote an obligation overdue at once (escalated on the next sweep), one ahead gave the person hours more.
      now: new Date(Date.now() + clockOffsetMs),
      dueInMs: this.config.OBLIGATION_DUE_MS,
    });
    // A source that could not be read may answer later: the hold is read again until its obligation is due.
    const recheckAt =
      systemMayRelease(reason) && everSent(op) && this.canReadBack(op)
        ? this.nextRecheckAt({ obligation }, 0, clockOffsetMs)
        : null;
    const moved = await this.transitions.operation(this.db.manager, {
      operation: snapshotOf(op),
      to: S.MANUAL_REVIEW,
      reason,
      whileCheckCount,
      patch: { evidence, obligation: obligation as unknown as Record<string, unknown>, next_check_at: recheckAt },
      eventData: {
        obligation: { owner: obligation.owner, due_at: obligation.due_at },
        recheck_at: recheckAt?.toISOString() ?? null,
      },
    });
    if (!moved.won) return 'skipped: lost race';
    await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: op.executionId });
    if (recheckAt) await this.scheduleRecheck(op, recheckAt, clockOffsetMs);
    return 'held';
  }
}

/** The status model lets the system itself release a hold for this reason (a source that was unreachable or lagging). */
function systemMayRelease(reason: TerminalReason | null): boolean {
  return (
    reason !== null && Boolean(operationTransitionRule(S.MANUAL_REVIEW, S.VERIFIED)?.systemWhenHeldFor.includes(reason))
  );
}

/**
 * The database's now as this process reckons it (`clockOffsetMs` measured at a read), for a time written into history
 * beside times the database stamped: a host whose clock is off would date it before the move it follows.
 */
function databaseNowIso(clockOffsetMs: number): string {
  return new Date(Date.now() + clockOffsetMs).toISOString();
}

/**
 * The data of a re-check's `operation.rechecked` event: who or what asked (`trigger`), what the read found and showed,
 * the hold's reason, then what this write adds (the next re-check, `after`, `duplicate_run`, `superseded`,
 * `refutation_on_record`, `decided_meanwhile`). The one builder of it, for every write of a re-check's read.
 */
function recheckedData(
  trigger: Record<string, unknown>,
  /**
   * Null: no read was made (a reviewer's job that started after its hold was decided, or that cannot read it back):
   * `result` and `evidence` null.
   */
  read: ReadBackResult | null,
  heldFor: TerminalReason | null,
  more: Record<string, unknown>,
): Record<string, unknown> {
  return { ...trigger, result: read?.kind ?? null, evidence: read?.evidence ?? null, held_for: heldFor, ...more };
}

/**
 * Why a reviewer's re-check of a hold still open made no read (`cannot_read_back` in its event): never sent (nothing
 * to read), no connector of the operation's name deployed, or the connector declares no read of the operation.
 */
type CannotReadBack = 'never_sent' | 'connector_unavailable' | 'no_read_back';

/** Who asked for a reviewer's re-check and when, as its events name them. */
function reviewerTrigger(request: RecheckRequestShown): Record<string, unknown> {
  return { trigger: 'reviewer', requested_by: request.requestedBy, requested_at: request.requestedAt };
}

/** What a read showed of the effect, as kept on the obligation (`effect_shown`), dated on the database's clock. */
function effectShown(read: ReadBackResult, clockOffsetMs: number): Record<string, unknown> {
  return { result: read.kind, evidence: read.evidence, at: databaseNowIso(clockOffsetMs) };
}

/** A re-check's evidence written by a second run of its job, whose request the other run used (see settle). */
function asDuplicateRun(evidence: Record<string, unknown>): Record<string, unknown> {
  const recheck = evidence.recheck as Record<string, unknown> | undefined;
  return { ...evidence, recheck: { ...recheck, duplicate_run: true } };
}
