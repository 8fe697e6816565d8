import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import {
  ReadBackResult,
  type SecretsRead,
  TenantConnectors,
  readBackBindingProblems,
  readBackThrew,
  resendReference,
  secretBindingProblems,
  textPrefix,
} from '@verity/connectors';
import {
  Approval,
  OperationEntity,
  amountCapsOf,
  TransitionService,
  connectorOperation,
  databaseClockOffsetMs,
  findExecution,
  findApprovalDecisionOnRequest,
  findLastApprovalDecision,
  findLastStatusChanges,
  findOperation,
  findOperationWithSecretsHeld,
  findOperationWithVersionAndSecretsHeld,
  findVersionsBeforeInvestigations,
  insertExecution,
  isKeyActive,
  isUniqueViolation,
  lockActiveKey,
  recordRecheckRequest,
  lockOperationAtVersion,
  loadTenantSettings,
  lockRetried,
  obligationDueMs,
  recordedResolution,
  setRetryOf,
  findRetryOf,
  readSnapshot,
  snapshotOf,
  traceParentsOf,
  transaction,
  retriesRefuted,
  retryChainsOf,
  RETRY_CHAIN_DEPTH,
  type RetryChain,
} from '@verity/persistence';
import {
  LOGGER,
  Logger,
  VERITY_CONFIG,
  VerityConfig,
  currentTraceparent,
  inTraceOf,
  newId,
  tracingOn,
} from '@verity/platform';
import {
  JobName,
  JobProducer,
  advanceRetriesOf,
  releaseDispatchJobId,
  reviewerRecheckJobId,
  scheduledRecheckJobId,
} from '@verity/queues';
import {
  CANCEL_CAUSE_OF_ENDED_EXECUTION,
  ExecutionStatus,
  OperationStatus,
  ResolutionOption,
  ResolutionStatus,
  canRetry,
  operationTransitionRule,
  MAX_INVESTIGATION_BYTES_PER_HOLD,
  MAX_INVESTIGATIONS_PER_HOLD,
  failedRefusedByRead,
  verifiedRefusedByRead,
  StatusModelErrorCode,
  offeredResolutions,
  resolutionRefusedBy,
  retryRuleOf,
  operationRetryRule,
  RetryRule,
  retryRefusedByLaterRead,
  retryRefusedByAcknowledgement,
  readShowsTheEffect,
  DENIAL,
  DENIAL_LIMIT,
  denialLimitReached,
  everSent,
  needsApproval,
  releaseGrantsApproval,
  approvalDecidable,
  shownApprovalState,
  approvalRequestWaits,
  tenantApprovalRules,
} from '@verity/status-model';
import { DataSource, EntityManager } from 'typeorm';
import type { Principal } from '../auth/principal';
import { FieldError, Problem } from '../problem/problem';
import { cancelledBy } from '../executions/executions.service';
import { databaseNowForApprovals, pastDeadlineAt } from '../executions/approval-clock';
import { readForAnswer, readSnapshotForAnswer } from '../executions/execution-read';
import { presentExecution, presentOperation, requestedOperation, shownRetryRule } from '../executions/presenter';
import { preconditionFailed, versionConditionFailed } from '../http/if-match';
import { refuseSecretValuesIn, secretValueErrorsIn } from '../http/secret-values';
import { LIMITS, operationCapAmountErrors, operationParamsErrors, referenceUnsettled } from '../executions/submission';
import { ResolutionOptionsService } from './resolution-options.service';

@Injectable()
export class OperationsService {
  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly transitions: TransitionService,
    private readonly producer: JobProducer,
    private readonly connectors: TenantConnectors,
    private readonly holds: ResolutionOptionsService,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    this.traced = tracingOn(config);
  }

  private readonly traced: boolean;

  /**
   * With traces on, the work a decision sets off (the jobs it enqueues) joins the execution's trace, not the request's:
   * one trace per execution. Off, no lookup.
   */
  private async inExecutionTrace(executionId: string, enqueue: () => Promise<unknown>): Promise<void> {
    if (!this.traced) {
      await enqueue();
      return;
    }
    const traces = await traceParentsOf(this.db.manager, 'executions', [executionId]);
    await inTraceOf(traces.get(executionId), enqueue);
  }

  /**
   * The operation, read for an answer of it (readForAnswer: the same statement tells whether the tenant holds any
   * secret, so a tenant holding none is answered — a 404 too — with no round trip to confirm its secrets).
   */
  private async load(principal: Principal, id: string): Promise<OperationEntity> {
    const op = await readForAnswer(this.connectors, principal.tenantId, (held) =>
      findOperationWithSecretsHeld(this.db.manager, id, principal.tenantId, held),
    );
    if (!op) throw Problem.notFound('Operation', id);
    return op;
  }

  /**
   * The operation and its version (operationVersionOf: the ETag a decision's If-Match names), read together for an
   * answer of it (readForAnswer, as `load`). `begun`: taken before `db`'s snapshot (by default now: `db` takes its
   * snapshot with this statement, or reads with a snapshot of its own).
   */
  private async loadAt(
    principal: Principal,
    id: string,
    db: EntityManager = this.db.manager,
    begun?: SecretsRead,
  ): Promise<{ op: OperationEntity; version: string }> {
    const found = await readForAnswer(
      this.connectors,
      principal.tenantId,
      (held) => findOperationWithVersionAndSecretsHeld(db, id, principal.tenantId, held),
      begun,
    );
    if (!found) throw Problem.notFound('Operation', id);
    return { op: found.operation, version: found.version };
  }

  /**
   * If-None-Match on a decision or a re-check (RFC 9110 §13.1.2): 412 when the operation is at a version it names (`*`
   * names any: the operation exists), before anything is judged or written; 404 as always for an operation this
   * tenant does not have. `*` is settled here (an operation is never deleted); the versions named are returned, and the
   * statement that writes compares them again with the row it locks (`whileVersionNotIn`, lockOperationAtVersion): the
   * operation can come back to a version named after this read (a rule of the approval policy removed and added again).
   */
  async refuseNoneMatch(
    principal: Principal,
    id: string,
    ifNoneMatch: readonly string[] | '*' | undefined,
  ): Promise<readonly string[] | undefined> {
    if (ifNoneMatch === undefined) return undefined;
    const { version } = await this.loadAt(principal, id);
    if (ifNoneMatch === '*' || ifNoneMatch.includes(version)) {
      throw versionConditionFailed('the operation', { ifNoneMatch });
    }
    return ifNoneMatch;
  }

  /**
   * The operation as shown (GET, and the answer to each decision), and the version shown: its ETag. Every read is made
   * on one snapshot (readSnapshot): read by statements of their own, a cancel committed after the operation's read
   * showed it still held, with its last move and its options judged from after the cancel (its execution ended).
   */
  async get(principal: Principal, id: string) {
    // The operation's read tells whether the tenant holds any secret (readForAnswer).
    return readSnapshotForAnswer(this.db, this.connectors, async (db, secretsRead) => {
      const { op, version } = await this.loadAt(principal, id, db, secretsRead);
      const changes = await findLastStatusChanges(db, [op.id], principal.tenantId);
      const judged = await this.holds.judgeOne(principal.tenantId, op, db);
      // The resolutions a reviewer may take and, for each one refused, why: the console shows exactly this, so it
      // never offers what the API would refuse. Once a resolution is recorded (a release waiting for the dispatcher
      // included), nothing more is permitted: the decision was made.
      const options = judged?.options ?? [];
      return {
        view: {
          ...presentOperation(
            op,
            changes.get(op.id) ?? null,
            options,
            await this.approvalPastDeadline(principal, op, db),
            (await retriesRefuted(db, principal.tenantId, [op])).has(op.id),
            (await retryChainsOf(db, principal.tenantId, [op])).get(op.id),
          ),
          permitted_resolutions: offeredResolutions(options),
          resolution_options: options,
        },
        version,
      };
    });
  }

  /**
   * I13: one decision per approval. Written by one compare-and-set that includes "not decided yet" (and, for a deny,
   * moves the operation to CANCELLED in the same statement), so of any number of concurrent decisions exactly one is
   * written; every other caller gets 409 already-decided with the winner's decision. A decision is kept even when it
   * arrives before the operation starts waiting (planning has not run yet): planning finds it and does not ask again.
   */
  async decide(
    principal: Principal,
    id: string,
    decision: 'approve' | 'deny',
    reason: string | undefined,
    requestedAt?: string,
    ifMatch?: readonly string[],
    ifNoneMatch?: readonly string[],
  ) {
    await refuseSecretValuesIn(this.connectors, principal.tenantId, [['reason', reason]]);
    // The request the reviewer was shown, as the API shows one (toISOString): compared in the statement that writes.
    const shown = requestedAt === undefined ? undefined : new Date(requestedAt).toISOString();
    // The operation and why a decision made first refuses this one, read on one snapshot (readSnapshot).
    const { op, version } = await readSnapshot(this.db, async (db) => {
      const found = await this.loadAt(principal, id, db);
      if (found.op.status !== OperationStatus.PREPARED || isDecided(found.op.approval)) {
        const refusal =
          (await this.decidedOnShown(principal, found.op, shown, db)) ??
          (await this.approvalRefusal(principal, found.op, false, db));
        throw unlessStale(refusal, ifMatch, found.version);
      }
      if (shown !== undefined && found.op.approval?.requested_at !== shown)
        throw unlessStale(await this.requestRefusal(principal, found.op, shown, db), ifMatch, found.version);
      return found;
    });
    refuseStale(ifMatch, version);
    if (!approvalDecidable(await this.approvalRequired(principal, op), op.approval)) {
      throw Problem.conflict(
        'not-awaiting-approval',
        'the operation does not wait for approval: neither the agent nor the tenant’s policy asks for one',
        { current_status: op.status },
      );
    }
    // Its decided_at (and a grant's expires_at) are written by the statement, from the database's clock.
    const approval: Partial<Approval> =
      decision === 'approve'
        ? this.grantBy(principal, reason)
        : { state: 'denied', decided_by: principal.keyId, reason };
    const decided = await this.transitions.decide(this.db.manager, {
      operation: snapshotOf(op),
      tenantId: principal.tenantId,
      byKey: principal.keyId,
      open: 'approval',
      event: { type: 'approval.decided', data: { decision, reason, by: principal.keyId } },
      merge: { approval: approval as Record<string, unknown> },
      approvalStamp: decision === 'approve' ? { validForMs: this.config.APPROVAL_TTL_MS } : {},
      // A grant is for a send; past the execution's deadline nothing more is sent for it. A deny still ends it.
      whileBeforeDeadline: decision === 'approve',
      whileRequestedAt: shown,
      whileVersionIn: ifMatch,
      whileVersionNotIn: ifNoneMatch,
      move:
        decision === 'deny'
          ? {
              ...DENIAL,
              eventData: { cause: 'approval_denied', by: principal.keyId, reason },
            }
          : undefined,
    });
    if (!decided.won) {
      await this.refuseRevokedKey(principal);
      // Why it lost, read on one snapshot (readSnapshot).
      throw await readSnapshot(this.db, async (db) => {
        const { op: now, version: nowVersion } = await this.loadAt(principal, id, db);
        if (ifNoneMatch?.includes(nowVersion)) return versionConditionFailed('the operation', { ifNoneMatch });
        if (
          shown !== undefined &&
          now.status === OperationStatus.PREPARED &&
          !isDecided(now.approval) &&
          now.approval?.requested_at !== shown
        ) {
          return unlessStale(await this.requestRefusal(principal, now, shown, db), ifMatch, nowVersion);
        }
        const refusal =
          (await this.decidedOnShown(principal, now, shown, db)) ??
          (await this.approvalRefusal(principal, now, true, db));
        return unlessStale(refusal, ifMatch, nowVersion);
      });
    }
    await this.inExecutionTrace(op.executionId, () =>
      this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: op.executionId }),
    );
    return this.get(principal, id);
  }

  /**
   * A decision that names the request it answers (`requested_at`, as shown) when another is waiting: a request is asked
   * for again only after a grant of the one before was withdrawn (stale), so the request shown was decided — 409
   * already-decided naming that decision, as for any decision that came second (I13). A request never on record (nothing
   * was decided): 412 precondition-failed with the request that waits. Either way nothing is written.
   */
  private async requestRefusal(
    principal: Principal,
    op: OperationEntity,
    shown: string,
    db: EntityManager = this.db.manager,
  ): Promise<Problem> {
    const decided = await this.decidedOnShown(principal, op, shown, db);
    if (decided) return decided;
    const current = op.approval?.requested_at;
    return new Problem(
      412,
      'precondition-failed',
      'Precondition failed',
      `the decision answers the approval request of ${shown}, which is not the one waiting` +
        `${current ? ` (requested at ${current})` : ' (none has been asked for yet)'}; nothing was written: read the ` +
        'operation again and decide on what it shows now',
      { ...(current && { requested_at: current }), current_status: op.status },
    );
  }

  /**
   * 409 already-decided naming the decision made on the request shown (`requested_at`), when that is not the request
   * on the operation now, or null (none shown, it is the one on the operation, or it was never decided). The decision
   * on it is the winner, not the operation's last one: the grant of a later request may have been withdrawn too, or
   * stand (the operation may have been sent on it) — another reviewer's decision on a request this one never saw.
   */
  private async decidedOnShown(
    principal: Principal,
    op: OperationEntity,
    shown: string | undefined,
    db: EntityManager = this.db.manager,
  ): Promise<Problem | null> {
    const current = op.approval?.requested_at;
    if (shown === undefined || current === shown) return null;
    const winner = await findApprovalDecisionOnRequest(db, op.id, principal.tenantId, shown);
    if (!winner) return null;
    const state = winner.decision === 'deny' ? 'denied' : 'granted';
    const requested = current ? ` (requested at ${current})` : '';
    const now = isDecided(op.approval)
      ? `approval was asked for again since${requested}, and that request was ${op.approval!.state}`
      : `the grant has since been withdrawn and approval asked for again${requested}`;
    return Problem.alreadyDecided(
      `the approval request of ${shown} was already ${state}; ${now}: review the operation as it is now`,
      {
        decision: winner.decision ?? 'approve',
        ...(winner.by && { decided_by: winner.by }),
        decided_at: winner.at.toISOString(),
        // As the operation shows the request on it now: withdrawn too once its execution's deadline has passed.
        approval: shownApprovalState(
          op.status,
          op.approval?.state ?? 'requested',
          await this.approvalPastDeadline(principal, op, db),
        ),
        ...(current && { requested_at: current }),
        current_status: op.status,
      },
    );
  }

  /**
   * Whether the operation's approval request waits past its execution's deadline, by the database's clock (the one the
   * deadline is on and an approve is refused by): shown withdrawn then. Only a request still waiting is judged (two
   * more reads, for it alone).
   */
  private async approvalPastDeadline(
    principal: Principal,
    op: OperationEntity,
    db: EntityManager = this.db.manager,
  ): Promise<boolean> {
    if (!approvalRequestWaits(op.status, op.approval?.state)) return false;
    // One after the other: `db` may be a transaction's one connection (readSnapshot).
    const execution = await findExecution(db, op.executionId, principal.tenantId);
    const databaseNow = await databaseNowForApprovals(db, [op]);
    return pastDeadlineAt(execution?.deadlineAt, databaseNow);
  }

  /**
   * A decision statement that wrote nothing may have found the deciding key revoked (it checks the key): that key is
   * told so, not that someone else decided or the operation moved.
   */
  private async refuseRevokedKey(principal: Principal): Promise<void> {
    if (!(await isKeyActive(this.db.manager, principal.keyId))) throw Problem.keyRevokedMidRequest();
  }

  /**
   * The approval a reviewer's release grants with it (releaseGrantsApproval), or null: required by the agent or the
   * tenant's policy as it stands now, or on record. A fresh grant, as an approval decision would give it; the send guard
   * requires it granted and unexpired.
   */
  private async approvalGrantedByRelease(principal: Principal, op: OperationEntity): Promise<Approval | null> {
    if (!releaseGrantsApproval(await this.approvalRequired(principal, op), op.approval)) return null;
    return this.grantBy(
      principal,
      'granted with the release of the held operation (its resolution holds the evidence)',
    );
  }

  /** Whether the operation needs approval: the agent's flag, or a rule of the tenant's policy as it stands now. */
  private async approvalRequired(principal: Principal, op: OperationEntity): Promise<boolean> {
    const settings = await loadTenantSettings(this.db.manager, principal.tenantId);
    return needsApproval(op, tenantApprovalRules(settings, this.connectors.approvalAmountDeclarations()));
  }

  /**
   * A grant by this principal: an approval decision's, and a release's. Valid for APPROVAL_TTL_MS from when it is
   * written, by the database's clock: the statement that writes it stamps `decided_at` and `expires_at`
   * (`approvalStamp`), as the send guard compares the expiry with that clock — this process's may be off.
   */
  private grantBy(principal: Principal, reason: string | undefined): Approval {
    return { state: 'granted', decided_by: principal.keyId, reason };
  }

  /**
   * 409 already-decided (`decision: "cancel"`) for a decision on an operation that its execution's cancel ended first (I13:
   * the cancel is the decision that was made), or null. `db`: the snapshot `op` was read on (readSnapshot), so its
   * three reads and the operation's show one moment.
   */
  private async cancelledWithItsExecution(
    principal: Principal,
    op: OperationEntity,
    db: EntityManager = this.db.manager,
  ): Promise<Problem | null> {
    if (op.status !== OperationStatus.CANCELLED) return null;
    const execution = await findExecution(db, op.executionId, principal.tenantId);
    if (execution?.status !== ExecutionStatus.CANCELLED) return null;
    // Ended by that cancel, not before it by the system (an operation it depends on that failed): its own move says so.
    const change = (await findLastStatusChanges(db, [op.id], principal.tenantId)).get(op.id);
    if (change?.cause !== CANCEL_CAUSE_OF_ENDED_EXECUTION[ExecutionStatus.CANCELLED]) return null;
    return Problem.alreadyDecided('the execution was cancelled first', {
      decision: 'cancel',
      ...(await cancelledBy(db, op.executionId, principal.tenantId)),
      current_status: op.status,
    });
  }

  /**
   * Why an approval decision was not written: someone decided first (who and what), the operation moved on, or —
   * `lostStatement`: the statement itself refused a still open request — its execution's deadline passed.
   */
  private async approvalRefusal(
    principal: Principal,
    op: OperationEntity,
    lostStatement = false,
    db: EntityManager = this.db.manager,
  ): Promise<Problem> {
    if (isDecided(op.approval)) {
      const decision = op.approval!.state === 'granted' ? 'approve' : 'deny';
      return Problem.alreadyDecided(`the operation was already ${op.approval!.state}`, {
        decision,
        decided_by: op.approval!.decided_by,
        decided_at: op.approval!.decided_at,
        approval: op.approval!.state,
        current_status: op.status,
      });
    }
    const cancelled = await this.cancelledWithItsExecution(principal, op, db);
    if (cancelled) return cancelled;
    // Asked for and never decided, and ended by the system first (its execution's deadline, an operation it depends on
    // that failed, a spending cap): that end is the decision that was made, as a person's cancel would be (I13).
    const ended =
      op.approval?.state && op.status === OperationStatus.CANCELLED
        ? await this.settledBySystem(principal, op, OperationStatus.PREPARED, db)
        : null;
    if (ended) {
      return Problem.alreadyDecided('the operation was ended by the system before it was decided', {
        decision: 'cancel',
        ...ended,
        current_status: op.status,
      });
    }
    // Still PREPARED and undecided after the statement refused it: either its execution's deadline passed (by the
    // database's clock, as the send guard reads it), or another decision was written first and is not on the row any
    // more — the dispatcher withdrew that grant as stale (expired, or the source changed) and asked again before this
    // reload. Then the decision that won is named (I13), not a deadline that has not passed.
    if (lostStatement && op.status === OperationStatus.PREPARED) {
      const winner = await findLastApprovalDecision(db, op.id, principal.tenantId);
      if (winner && !winner.deadlinePassed) {
        const state = winner.decision === 'deny' ? 'denied' : 'granted';
        return Problem.alreadyDecided(
          `the operation was already ${state}; the grant has since been withdrawn and approval asked for again`,
          {
            decision: winner.decision ?? 'approve',
            ...(winner.by && { decided_by: winner.by }),
            decided_at: winner.at.toISOString(),
            approval: shownApprovalState(op.status, op.approval?.state ?? 'requested'),
            current_status: op.status,
          },
        );
      }
      const execution = await findExecution(db, op.executionId, principal.tenantId);
      const deadline = execution?.deadlineAt.toISOString();
      return Problem.conflict(
        'not-awaiting-approval',
        `its execution’s deadline passed${deadline ? ` at ${deadline}` : ''}: nothing more is sent for it, so a grant ` +
          'could never be carried out; deny it, or cancel the execution',
        // Shown withdrawn by the operation too (shownApprovalState): this answer and the operation say the same.
        { current_status: op.status, approval: 'withdrawn', ...(deadline && { deadline_at: deadline }) },
      );
    }
    // A request still on record is shown withdrawn (shownApprovalState): this answer and the operation say the same.
    const withdrawn = op.approval?.state && shownApprovalState(op.status, op.approval.state) === 'withdrawn';
    return Problem.conflict(
      'not-awaiting-approval',
      withdrawn
        ? `its approval request was withdrawn: the operation is ${op.status}` +
            (op.status === OperationStatus.MANUAL_REVIEW
              ? ', held for a reviewer’s resolution (a release grants the approval with it)'
              : '')
        : `the operation is ${op.status}; only a PREPARED operation can be approved`,
      { current_status: op.status, ...(withdrawn && { approval: 'withdrawn' }) },
    );
  }

  /**
   * A reviewer's FAILED refused by its own read of the source, which showed the effect: that read is kept on the hold
   * (`effect_shown`, with an `operation.rechecked` event, `trigger: "resolution"`), as a re-check's is. Otherwise a
   * source that then loses the record (a lagging replica, reads that flap) let the next FAILED through — `commit:
   * rejected`, retry `safe` — of an effect Verity had just read. The status does not change; a hold that moved or was
   * resolved meanwhile is left as it is (the refusal stands either way).
   */
  private async keepEffectShown(principal: Principal, op: OperationEntity, read: ReadBackResult): Promise<void> {
    if (op.obligation?.effect_shown) return;
    // On the database's clock, as a re-check's `at` and the events beside it.
    const at = new Date(Date.now() + (await databaseClockOffsetMs(this.db.manager))).toISOString();
    // What the read showed, as the `operation.rechecked` event records it (a re-check's event has the same members).
    const shown = {
      trigger: 'resolution',
      requested_by: principal.keyId,
      result: read.kind,
      evidence: read.evidence ?? null,
      held_for: op.terminalReason,
    };
    const kept = await this.transitions.annotate(this.db.manager, {
      executionId: op.executionId,
      operationId: op.id,
      whileStatus: OperationStatus.MANUAL_REVIEW,
      whileUnresolved: true,
      merge: { obligation: { effect_shown: { result: read.kind, evidence: read.evidence ?? null, at } } },
      type: 'operation.rechecked',
      data: shown,
    });
    if (kept.won) return;
    // Another reviewer's FAILED was written while this read was made: the effect the source shows now refutes it, as a
    // re-check's read after a FAILED does. Dropped, the FAILED stood as "no effect exists, a retry is safe".
    const refuted = await this.transitions.annotate(this.db.manager, {
      executionId: op.executionId,
      operationId: op.id,
      whileStatus: OperationStatus.FAILED,
      whileObligationLacks: 'effect_shown_after_failed',
      merge: { obligation: { effect_shown_after_failed: { result: read.kind, at } } },
      type: 'operation.rechecked',
      data: { ...shown, after: OperationStatus.FAILED },
    });
    if (!refuted.won) return;
    this.logger.warn(
      { operationId: op.id, executionId: op.executionId },
      'a resolution’s read found the effect of an operation another reviewer had just resolved FAILED',
    );
    // The execution's criteria and the retries made on that FAILED are judged again, as after a re-check's refutation.
    await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: op.executionId });
    await advanceRetriesOf(this.db.manager, this.producer, this.logger, op);
  }

  /**
   * A refusal made on the source's read stands only while the hold is still undecided: a decision written while the
   * read was on its way won (I13), and the loser is told who decided what, not "not permitted (yet)" of a hold that is
   * no longer there to decide.
   */
  private async unlessDecidedMeanwhile(
    principal: Principal,
    id: string,
    investigationsSeen: number,
    refusal: Problem,
  ): Promise<Problem> {
    const decided = await readSnapshot(this.db, async (db) => {
      const { op: now } = await this.loadAt(principal, id, db);
      return this.decidedFirst(principal, now, investigationsSeen, db);
    });
    return decided ?? refusal;
  }

  /**
   * Resolution of MANUAL_REVIEW by a human, only with an action the status model permits (I13, I14). One
   * compare-and-set that includes "not resolved yet", so one of any number of concurrent resolutions is written.
   * A FAILED of a sent operation whose source can be read back is accepted only if a read at this moment does not
   * find the effect: a reviewer cannot relabel a proven effect as "no effect exists" (which would make a retry look
   * safe). Releasing a never-sent operation (SENT) is recorded here and carried out by the dispatcher, which commits
   * SENT right before it calls the connector — so "SENT is committed before the call" holds for human releases too.
   */
  async resolve(
    principal: Principal,
    id: string,
    status: ResolutionStatus,
    evidence: string,
    ifMatch?: readonly string[],
    ifNoneMatch?: readonly string[],
  ) {
    // The hold and its options are judged on one snapshot (readSnapshot): judged from a read of the execution made
    // after the operation's, a cancel committed in between showed the execution ended beside a hold still held.
    const { op, also: judged } = await this.loadUndecided(principal, id, evidence, ifMatch, (held, db) =>
      this.holds.judgeOne(principal.tenantId, held, db),
    );
    const options = judged?.options ?? [];
    const now = judged?.now ?? new Date();
    const evidentAt = judged?.absenceEvidentAt ?? null;
    const option = options.find((o) => o.status === status);
    const permitted = offeredResolutions(options);
    /** Not "no": "not yet" — with what the reviewer may do meanwhile, and when to ask again. */
    const notYet = (why: string, extras: Record<string, unknown>, retryAfterMs: number) =>
      new Problem(
        409,
        'resolution-not-permitted',
        'Conflict with the current state',
        `${status} is not permitted yet: ${why}`,
        { current_status: op.status, permitted_resolutions: permitted, resolution_options: options, ...extras },
        { 'retry-after': String(Math.max(1, Math.ceil(retryAfterMs / 1000))) },
      );
    if (option?.available_at) {
      // Retry-After says when what the reviewer sees at the source becomes evidence.
      throw notYet(
        option.why,
        { absence_evident_at: option.available_at },
        Date.parse(option.available_at) - now.getTime(),
      );
    }
    if (!option?.permitted) {
      // Read on the snapshot the options were judged on: an operation its execution's cancel ended first was answered
      // by loadUndecided as any decision that lost to that cancel (I13); one still held here was held then.
      const refusal = resolutionRefusedBy(
        {
          status: op.status,
          everSent: everSent(op),
          heldFor: op.terminalReason,
          acknowledged: op.acknowledgedAt !== null,
          effectShown: Boolean(op.obligation?.effect_shown),
          rejected: Boolean(op.rejectedAt),
        },
        status,
      );
      if (option && refusal?.code === StatusModelErrorCode.EFFECT_EXISTS) throw recordOnFile(op, option.why);
      if (option && refusal?.code === StatusModelErrorCode.PROVIDER_REJECTED) {
        throw rejectionOnFile(op, option.why, options);
      }
      throw Problem.conflict(
        'resolution-not-permitted',
        op.status === OperationStatus.MANUAL_REVIEW
          ? `${status} is not permitted for this operation: ${option?.why ?? 'unknown'}; permitted: ${permitted.join(', ')}`
          : `the operation is ${op.status}, not MANUAL_REVIEW`,
        { current_status: op.status, permitted_resolutions: permitted, resolution_options: options },
      );
    }
    // Its `at` is written by the statement that records it (resolutionStamp): that statement's reading of the database's
    // clock, the time of its events. The sweeper compares a release's `at` with that clock (a release whose dispatch is
    // owed); by an API host's clock a resolution could precede the hold it resolves.
    const resolution: Record<string, unknown> = { status, evidence, by: principal.keyId };
    // The source read at the moment of the decision (FAILED; VERIFIED where the provider's lookup can refute it).
    const read = option.check === 'read_back' ? await this.readSourceNow(op) : null;
    const readBack = read && { kind: read.kind, evidence: read.evidence ?? null };
    // A "still unknown" recorded since this read is another reviewer's decision on the hold, made first (I13).
    const investigationsSeen = op.obligation?.investigations?.length ?? 0;
    const refuse = (refusal: Problem) => this.unlessDecidedMeanwhile(principal, id, investigationsSeen, refusal);
    if (read && status === OperationStatus.VERIFIED) {
      // A sent operation always has the bound; none would mean nothing can still land.
      const absenceEvidentFrom = evidentAt ?? now;
      const refusal = verifiedRefusedByRead(read.kind, this.holds.absenceAtTheSource(op), now >= absenceEvidentFrom);
      if (refusal === 'not_yet') {
        // The provider does not show it, but a call of it may still land or show: its lookup can answer only later.
        throw await refuse(
          notYet(
            `the provider does not show this effect, and may not yet: ask again from ${absenceEvidentFrom.toISOString()}, ` +
              'when its lookup either shows it or answers that it does not exist',
            { read_back: readBack, absence_evident_at: absenceEvidentFrom.toISOString() },
            absenceEvidentFrom.getTime() - now.getTime(),
          ),
        );
      }
      if (refusal === 'refuted') {
        // The provider's own lookup answers that the effect does not exist, and the provider never said it did: the
        // record would say "it happened" against the one source that can say. Nothing is written.
        throw await refuse(
          Problem.conflict(
            'resolution-not-permitted',
            'VERIFIED is not permitted: the provider answers that this effect does not exist; if it appears there, ' +
              're-check the operation or resolve it again',
            {
              current_status: op.status,
              permitted_resolutions: permitted,
              resolution_options: options,
              read_back: readBack,
            },
          ),
        );
      }
    } else if (read) {
      const refusedByRead = failedRefusedByRead(read.kind, !(read.kind === 'unreachable' && read.notMade === true));
      // A record of the effect, even one without the field that tells its state, is an effect that happened.
      if (refusedByRead === 'effect_shown') {
        await this.keepEffectShown(principal, op, read);
        throw effectExists('the source shows this effect now: it cannot be marked as not having happened', read);
      }
      if (refusedByRead === 'source_unread') {
        // "No effect, a retry is safe" is not taken on a person's word where the source could say and cannot now: a
        // retry would send again an effect that may exist. Not yet, rather than never: the source may answer later.
        throw await refuse(
          notYet(
            `the source cannot be read now (${read.kind}) to show that the effect is not there; try again when it answers`,
            { read_back: readBack },
            this.config.RECHECK_BACKOFF_MS,
          ),
        );
      }
    }
    // A read that did not refuse the resolution — for FAILED: absent, or not made at all (refused by the tenant's
    // settings, or needing the reference the lost answer held) — stands with the reviewer's evidence.
    if (read) resolution.read_back = { kind: read.kind, ...read.evidence };
    const grant = status === OperationStatus.SENT ? await this.approvalGrantedByRelease(principal, op) : null;
    const decided = await this.transitions.decide(this.db.manager, {
      operation: snapshotOf(op),
      tenantId: principal.tenantId,
      byKey: principal.keyId,
      open: 'resolution',
      investigationsSeen,
      whileVersionIn: ifMatch,
      whileVersionNotIn: ifNoneMatch,
      // A release is recorded only while its execution can still carry it out (not ended, not past its deadline unless
      // completed): judged by the statement that records it, by the send guard's own condition — a cancel or expiry
      // committed since the options above were read is seen, and nothing is recorded that nothing would send.
      whileExecutionCarriesOutRelease: status === OperationStatus.SENT,
      event: { type: 'operation.resolved', data: resolution },
      // The approval a release grants is its own decision in the log, after the resolution that makes it.
      alsoEvents: grant
        ? [
            {
              type: 'approval.decided',
              data: { decision: 'approve', reason: grant.reason, by: principal.keyId, via: 'release' },
            },
          ]
        : undefined,
      merge:
        status === OperationStatus.SENT
          ? { obligation: { resolution }, ...(grant && { approval: grant as unknown as Record<string, unknown> }) }
          : { evidence: { resolution }, obligation: op.obligation ? { resolution } : undefined },
      ...(grant && { approvalStamp: { validForMs: this.config.APPROVAL_TTL_MS } }),
      // Its `at` is the statement's instant, the time of the events it writes (the move's: failure.at).
      resolutionStamp: true,
      move: status === OperationStatus.SENT ? undefined : { to: status, eventData: { resolution } },
    });
    if (!decided.won) {
      await this.refuseRevokedKey(principal);
      // Why it lost, read on one snapshot (readSnapshot): the operation read before a cancel and its options judged
      // after it answered "SENT is not permitted: execution ended" beside a hold still shown MANUAL_REVIEW.
      throw await readSnapshot(this.db, async (db) => {
        const { op: now, version: nowVersion } = await this.loadAt(principal, id, db);
        if (ifNoneMatch?.includes(nowVersion)) return versionConditionFailed('the operation', { ifNoneMatch });
        const undecided = !recordedResolution(now);
        const stillHeld = undecided && now.status === OperationStatus.MANUAL_REVIEW;
        // What was recorded while this decision was made (after its read, before its write) refuses it as if it had
        // come first, and the reviewer is told what — not merely that the row moved: for FAILED a re-check's read that
        // showed the effect, or the provider's 2xx; for VERIFIED the provider's rejection. Sent with If-Match, it is 412
        // as when the same record was on file before the read (each moves the version): the answer does not depend on
        // timing.
        if (status === OperationStatus.FAILED && undecided && now.obligation?.effect_shown) {
          return unlessStale(
            recordOnFile(now, 'a re-check of the source showed this effect while the resolution was decided'),
            ifMatch,
            nowVersion,
          );
        }
        if (status === OperationStatus.FAILED && stillHeld && now.acknowledgedAt) {
          return unlessStale(
            recordOnFile(now, 'the provider acknowledged this send while the resolution was decided'),
            ifMatch,
            nowVersion,
          );
        }
        if (status === OperationStatus.VERIFIED && stillHeld && now.rejectedAt) {
          const options = (await this.holds.judgeOne(principal.tenantId, now, db))?.options ?? [];
          const why = 'the provider’s rejection of this send came back while the resolution was decided';
          return unlessStale(rejectionOnFile(now, why, options), ifMatch, nowVersion);
        }
        if (status === OperationStatus.SENT && stillHeld) {
          // Its execution's deadline passed (or the execution ended) while the release was decided: refused as if it
          // had come after, with what may be done instead — not a bare "moved".
          const options = (await this.holds.judgeOne(principal.tenantId, now, db))?.options ?? [];
          const release = options.find((o) => o.status === OperationStatus.SENT);
          if (release && !release.permitted) {
            return unlessStale(
              Problem.conflict('resolution-not-permitted', `SENT is not permitted: ${release.why}`, {
                current_status: now.status,
                permitted_resolutions: offeredResolutions(options),
                resolution_options: options,
              }),
              ifMatch,
              nowVersion,
            );
          }
        }
        return unlessStale(await this.resolutionRefusal(principal, now, investigationsSeen, db), ifMatch, nowVersion);
      });
    }
    await this.inExecutionTrace(op.executionId, () =>
      status === OperationStatus.SENT
        ? // Re-armed: a release recorded again after a withdrawn one finds that one's finished job, kept for its
          // retention under the same id, which would swallow a plain add until the sweeper re-arms it.
          this.producer.tryEnqueueOrRearm(
            JobName.DISPATCH_OPERATION,
            { operationId: op.id, executionId: op.executionId },
            releaseDispatchJobId(op.id),
          )
        : this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId: op.executionId }),
    );
    return this.get(principal, id);
  }

  /**
   * A reviewer asks for the source of a held operation to be read now. The read is the reconciler's (it never sends);
   * what it finds is recorded as an `operation.rechecked` event, or releases the hold when the status model lets the
   * system do so (VERIFIED, read back, held because the source was unreachable or lagging).
   */
  async recheck(principal: Principal, id: string, ifMatch?: readonly string[], ifNoneMatch?: readonly string[]) {
    // The operation and why a decision made first refuses this request, read on one snapshot (readSnapshot).
    const { op, version } = await readSnapshot(this.db, async (db) => {
      const found = await this.loadAt(principal, id, db);
      if (recordedResolution(found.op)) {
        throw unlessStale(await this.resolutionRefusal(principal, found.op, undefined, db), ifMatch, found.version);
      }
      return found;
    });
    refuseStale(ifMatch, version);
    if (op.status !== OperationStatus.MANUAL_REVIEW) {
      throw Problem.conflict(
        'not-in-review',
        `the operation is ${op.status}; only a MANUAL_REVIEW operation is re-checked`,
        {
          current_status: op.status,
        },
      );
    }
    if (!everSent(op) || !this.holds.canReadBack(op)) {
      throw Problem.conflict(
        'cannot-read-back',
        !everSent(op)
          ? 'the operation was never sent: there is no effect to read back'
          : `${op.connector} cannot read this operation back; its outcome can only be established outside Verity`,
        { current_status: op.status },
      );
    }
    // The request is the job: it is made only while the key stands, the key's row share-locked until the job is in
    // Redis. A key revoked since the request was admitted (a cached key, a revocation still on its way) asks for
    // nothing, and a revocation made meanwhile waits for the enqueue: none answers before a job of its key is made.
    const asked = await transaction(this.db, async (tx) => {
      if (!(await lockActiveKey(tx, principal.keyId))) throw Problem.keyRevokedMidRequest();
      // Asked for only while the operation is still held and undecided (and at the version the reviewer saw, with
      // If-Match), share-locked until the job is in Redis: no change commits between. Judged on the row, not on the
      // read above: a resolution committed since was answered 202 and its re-check recorded as asked of the hold.
      if (!(await lockOperationAtVersion(tx, principal.tenantId, op.id, ifMatch, ifNoneMatch, true))) {
        return false;
      }
      // Who asked is recorded here, and the job only points to the record, which its re-check uses once: a job whose
      // data was edited or replayed (a writable Bull Board) cannot name a reviewer, nor speak for one a second time.
      const requestId = await recordRecheckRequest(tx, {
        tenantId: principal.tenantId,
        operationId: op.id,
        requestedBy: principal.keyId,
      });
      await this.inExecutionTrace(op.executionId, () =>
        this.producer
          .enqueue(
            JobName.RECHECK_OPERATION,
            { operationId: op.id, executionId: op.executionId, requestId },
            // Its own job for each recorded request: one made from the time let a second reviewer's request of
            // the same second be recorded (and answered 202) while its job was deduplicated away.
            { jobId: reviewerRecheckJobId(op.id, requestId) },
          )
          // The job is the whole request, and there is none: a 503 to ask again, not a 500 for an outage.
          .catch((error: unknown) => {
            throw Object.assign(Problem.queueUnavailable('the re-check was not asked for; ask again'), {
              cause: error,
            });
          }),
      );
      return true;
    });
    if (!asked) {
      throw await readSnapshot(this.db, async (db) => {
        const { op: now, version: nowVersion } = await this.loadAt(principal, id, db);
        if (ifNoneMatch?.includes(nowVersion)) return versionConditionFailed('the operation', { ifNoneMatch });
        return unlessStale(await this.resolutionRefusal(principal, now, undefined, db), ifMatch, nowVersion);
      });
    }
    return this.get(principal, id);
  }

  /**
   * "Still unknown after investigation" (recovery may be continued uncertainty; docs/semantics.md). The hold stays, the
   * obligation is re-dated (escalation cleared), the history shows who said so and why, and automatic re-checks of an
   * unreachable or lagging source start again. It is not a resolution: `obligation.resolution` stays unset, so a
   * later VERIFIED or FAILED is still possible. One compare-and-set that includes "not resolved yet" and "no other
   * investigation recorded since this read": of concurrent requests one is written, the others get 409.
   */
  async stillUnknown(
    principal: Principal,
    id: string,
    evidence: string,
    dueInSeconds: number | undefined,
    ifMatch?: readonly string[],
    ifNoneMatch?: readonly string[],
  ) {
    // The evidence is stored in the obligation and the event as a resolution's is, so it is held to the same rule.
    const { op } = await this.loadUndecided(principal, id, evidence, ifMatch, async () => null);
    if (op.status !== OperationStatus.MANUAL_REVIEW || !op.obligation) {
      throw Problem.conflict(
        'resolution-not-permitted',
        `the operation is ${op.status}, not MANUAL_REVIEW: there is no hold to keep`,
        { current_status: op.status },
      );
    }
    const seen = op.obligation.investigations ?? [];
    // The statement below writes only while the obligation still lists `seen.length` investigations, so of concurrent
    // records at the limit none gets past it.
    if (seen.length >= MAX_INVESTIGATIONS_PER_HOLD) {
      throw Problem.conflict(
        'resolution-not-permitted',
        `this hold already records ${seen.length} investigations (at most ${MAX_INVESTIGATIONS_PER_HOLD}): resolve ` +
          'it, or leave it to its escalation, rather than re-dating it again',
        { current_status: op.status, investigations: seen.length },
      );
    }
    // Nor past the evidence a hold keeps: checked here to say so, and again in the statement below, on the row it writes.
    const refusedBytes = investigationBytesRefusal(op, evidence);
    if (refusedBytes) throw refusedBytes;
    // On the database's clock: the sweeper finds the obligation overdue by it, and reads the next re-check by it. By an
    // API host's clock behind it by more than the due time, the re-dated obligation was overdue at once and escalated
    // on the next sweep, though the reviewer had just given it hours.
    const clockOffsetMs = await databaseClockOffsetMs(this.db.manager);
    const now = new Date(Date.now() + clockOffsetMs);
    const settings = await loadTenantSettings(this.db.manager, principal.tenantId);
    const dueInMs =
      dueInSeconds !== undefined
        ? dueInSeconds * 1000
        : obligationDueMs(settings, op.obligation.reason, this.config.OBLIGATION_DUE_MS);
    const dueAt = new Date(now.getTime() + dueInMs);
    const investigation = {
      evidence,
      by: principal.keyId,
      at: now.toISOString(),
      previous_due_at: op.obligation.due_at,
      due_at: dueAt.toISOString(),
    };
    // The reconciler reads an unreachable or lagging source again, from the start of its backoff, until the new due time.
    const recheckAt = this.systemMayRecheck(op) ? new Date(now.getTime() + this.config.RECHECK_BACKOFF_MS) : null;
    const nextCheckAt = recheckAt && recheckAt < dueAt ? recheckAt : null;
    const decided = await this.transitions.decide(this.db.manager, {
      operation: snapshotOf(op),
      tenantId: principal.tenantId,
      byKey: principal.keyId,
      open: 'resolution',
      investigationsSeen: seen.length,
      addsInvestigationBytes: Buffer.byteLength(evidence),
      whileVersionIn: ifMatch,
      whileVersionNotIn: ifNoneMatch,
      event: { type: 'operation.still_unknown', data: investigation },
      merge: {
        obligation: {
          due_at: investigation.due_at,
          escalated_at: null,
          investigations: [...seen, investigation],
          rechecks: 0,
        },
      },
      patch: { next_check_at: nextCheckAt },
    });
    if (!decided.won) {
      await this.refuseRevokedKey(principal);
      throw await readSnapshot(this.db, async (db) => {
        const { op: now, version: nowVersion } = await this.loadAt(principal, id, db);
        if (ifNoneMatch?.includes(nowVersion)) return versionConditionFailed('the operation', { ifNoneMatch });
        // Someone recorded one first (409 already-decided, naming it); else, the row's evidence leaves no room for it.
        const refusal =
          (await this.decidedFirst(principal, now, seen.length, db)) ??
          investigationBytesRefusal(now, evidence) ??
          (await this.resolutionRefusal(principal, now, seen.length, db));
        return unlessStale(refusal, ifMatch, nowVersion);
      });
    }
    if (nextCheckAt) {
      await this.inExecutionTrace(op.executionId, () =>
        this.producer.tryEnqueue(
          JobName.RECHECK_OPERATION,
          // The chain of automatic re-checks starts again from here: the one scheduled before reads nothing more.
          { operationId: op.id, executionId: op.executionId, dueAt: nextCheckAt.toISOString() },
          {
            jobId: scheduledRecheckJobId(op.id, nextCheckAt),
            delay: Math.max(0, nextCheckAt.getTime() - (Date.now() + clockOffsetMs)),
          },
        ),
      );
    }
    return this.get(principal, id);
  }

  /** A sent operation held because its source was unreachable or lagging, whose connector can read it back. */
  private systemMayRecheck(op: OperationEntity): boolean {
    const releasable = operationTransitionRule(
      OperationStatus.MANUAL_REVIEW,
      OperationStatus.VERIFIED,
    )?.systemWhenHeldFor;
    return (
      everSent(op) &&
      op.terminalReason !== null &&
      Boolean(releasable?.includes(op.terminalReason)) &&
      this.holds.canReadBack(op)
    );
  }

  /**
   * A resolution lost: someone decided the hold first (their decision is in the problem), or the operation moved on
   * without anyone deciding it.
   */
  private async resolutionRefusal(
    principal: Principal,
    op: OperationEntity,
    investigationsSeen?: number,
    db: EntityManager = this.db.manager,
  ) {
    const decided = await this.decidedFirst(principal, op, investigationsSeen, db);
    if (decided) return decided;
    // The row changed under the decision while nobody decided the hold: it is still held and unresolved (its attempt,
    // or a record the statement checks, changed meanwhile), or it left the hold by a move that is no decision on it.
    // There is no winner to name; the reviewer reloads it and decides again.
    return Problem.conflict('operation-moved', `the operation moved on to ${op.status}; reload it`, {
      current_status: op.status,
    });
  }

  /**
   * The operation a reviewer's decision (a resolution, a "still unknown") is about, once the decision may be made on
   * it: its evidence holds no secret value (400), nobody decided the hold first (409 already-decided, with the
   * winner), and it is still at the version If-Match names (412). With what `alsoRead` reads of it: all on one snapshot
   * (readSnapshot), so a change committed meanwhile (a cancel) is seen whole or not at all.
   */
  private async loadUndecided<T>(
    principal: Principal,
    id: string,
    evidence: string,
    ifMatch: readonly string[] | undefined,
    alsoRead: (op: OperationEntity, db: EntityManager) => Promise<T>,
  ): Promise<{ op: OperationEntity; also: T }> {
    await refuseSecretValuesIn(this.connectors, principal.tenantId, [['evidence', evidence]]);
    return readSnapshot(this.db, async (db) => {
      const { op, version } = await this.loadAt(principal, id, db);
      const decidedFirst =
        (await this.decidedFirst(principal, op, undefined, db)) ??
        (await this.stillUnknownOnShown(principal, op, ifMatch, version, db));
      if (decidedFirst) throw decidedFirst;
      refuseStale(ifMatch, version);
      return { op, also: await alsoRead(op, db) };
    });
  }

  /**
   * 409 already-decided when the version If-Match names is one a later "still unknown" of another reviewer was made on
   * or after (I13: a decision on that version lost to it), or null. The latest "still unknown" is named, as it is
   * without If-Match: it is what the reviewer reloads to. Otherwise a stale If-Match stays 412: the operation moved by
   * something that decided nothing.
   */
  private async stillUnknownOnShown(
    principal: Principal,
    op: OperationEntity,
    ifMatch: readonly string[] | undefined,
    version: string,
    db: EntityManager = this.db.manager,
  ): Promise<Problem | null> {
    if (ifMatch === undefined || ifMatch.includes(version) || !op.obligation?.investigations?.length) return null;
    const before = await findVersionsBeforeInvestigations(db, op.id, principal.tenantId);
    const seen = before.filter((b) => ifMatch.includes(b.version)).map((b) => b.investigation);
    return seen.length ? this.decidedFirst(principal, op, Math.min(...seen), db) : null;
  }

  /**
   * 409 already-decided when the hold was decided before this request (I13), with the winner's decision; null while it
   * is still undecided. The winner is a reviewer's resolution, another reviewer's "still unknown" recorded since
   * `investigationsSeen` investigations were read, the execution's cancel, or the system: a re-check whose read-back
   * VERIFIED the hold, or its execution's end that CANCELLED a never-sent one — the move the system made is then the
   * decision, as a person's would be.
   */
  private async decidedFirst(
    principal: Principal,
    op: OperationEntity,
    investigationsSeen?: number,
    db: EntityManager = this.db.manager,
  ): Promise<Problem | null> {
    const winner = recordedResolution(op);
    // A release its execution's end overtook (cancelled or expired before the dispatcher sent it) was never carried
    // out: the end is what decided the hold, and it is named below, not the release.
    const overtaken =
      winner?.status === OperationStatus.SENT &&
      op.status === OperationStatus.CANCELLED &&
      (await this.settledBySystem(principal, op, OperationStatus.MANUAL_REVIEW, db)) !== null;
    if (winner && !overtaken) {
      return Problem.alreadyDecided(`the operation was already resolved as ${winner.status}`, {
        decision: winner.status,
        decided_by: winner.by,
        decided_at: winner.at,
        current_status: op.status,
      });
    }
    const cancelled = await this.cancelledWithItsExecution(principal, op, db);
    if (cancelled) return cancelled;
    const settled = await this.settledBySystem(principal, op, OperationStatus.MANUAL_REVIEW, db);
    if (settled) {
      return Problem.alreadyDecided(`the system settled the hold first: it is ${op.status}`, {
        decision: op.status,
        ...settled,
        current_status: op.status,
      });
    }
    const investigations = op.obligation?.investigations ?? [];
    if (
      investigationsSeen !== undefined &&
      op.status === OperationStatus.MANUAL_REVIEW &&
      investigations.length > investigationsSeen
    ) {
      const last = investigations[investigations.length - 1];
      return Problem.alreadyDecided('another reviewer recorded "still unknown" first; reload it', {
        decision: OperationStatus.MANUAL_REVIEW,
        decided_by: last.by,
        decided_at: last.at,
        current_status: op.status,
      });
    }
    return null;
  }

  /**
   * Who moved the operation out of `from` and when, if that was the system (its last move is from there, by actor
   * `system`); null otherwise — still there, or moved by a person.
   */
  private async settledBySystem(
    principal: Principal,
    op: OperationEntity,
    from: OperationStatus,
    db: EntityManager = this.db.manager,
  ): Promise<{ decided_by: 'system'; decided_at: string; cause?: string } | null> {
    if (op.status === from) return null;
    const change = (await findLastStatusChanges(db, [op.id], principal.tenantId)).get(op.id);
    if (change?.from !== from || change.actor !== 'system') return null;
    return { decided_by: 'system', decided_at: change.at.toISOString(), ...(change.cause && { cause: change.cause }) };
  }

  /** A read of the source at this moment (never a send). A connector error is an unreachable source, not proof. */
  private async readSourceNow(op: OperationEntity): Promise<ReadBackResult> {
    const connector = this.connectors.require(op.connector);
    try {
      return await connector.readBack!(connectorOperation(op), await this.connectors.environmentOf(op));
    } catch (error) {
      return readBackThrew(op.connector, error);
    }
  }

  /**
   * What a submission of the operation would be refused for by the tenant's settings of now (400, as intake refuses
   * them): params, an expected state, an intent, the agent's id or the operation's key holding the value of one of the
   * tenant's secrets (`secret_value`: accepted before the value was made a secret, the retry stored it anew and answered
   * it), params naming a secret that the allowlist entry of its request's host does not bind now (`secret_not_bound`),
   * or a read-back the tenant's `read_back_binding: "bound"` does not count now (`read_back_unbound`). A retry of one
   * accepted under the settings of its time was made, and was refused at its send (a secret), or sent and then held for
   * a person because nothing might read it back (a read-back). Read before the retry's transaction, thrown in it after
   * the refusals of the effect (409): those say what a new submission would do.
   */
  private async errorsUnderTenantSettings(
    principal: Principal,
    op: OperationEntity,
    original: { intent: string; agentId: string },
  ): Promise<FieldError[]> {
    const errors = await secretValueErrorsIn(this.connectors, principal.tenantId, [
      ['params', op.params],
      ['expected_state', op.expectedState],
      ['intent', original.intent],
      ['agent_id', original.agentId],
      ['key', op.key],
    ]);
    // A connector a later release removed: judged (and answered) in the transaction, as before.
    const connector = this.connectors.get(op.connector);
    if (!connector) return errors;
    const readBacks = connector.settings?.readBackBinding
      ? readBackBindingProblems(connector, op.action, op.params)
      : [];
    if (!connector.settings?.secrets && readBacks.length === 0) return errors;
    const settings = await this.connectors.settingsOf({ tenantId: principal.tenantId, connector: op.connector });
    if (connector.settings?.secrets) {
      const allowHosts = this.connectors.callEnvironment({ allowHosts: settings.allowHosts }).tenant?.allowHosts;
      for (const problem of secretBindingProblems(connector, op.action, op.params, allowHosts)) {
        errors.push({ field: problem.field, rule: 'secret_not_bound', message: problem.message });
      }
    }
    if (settings.readBackBinding === 'bound') {
      for (const problem of readBacks) {
        errors.push({ field: problem.field, rule: 'read_back_unbound', message: problem.message });
      }
    }
    return errors;
  }

  /**
   * I5: a retry is a new operation (retry_of), only from FAILED or CANCELLED. It runs as a new execution, so the
   * original execution's history stays exactly as it happened.
   */
  async retry(principal: Principal, id: string) {
    const op = await this.load(principal, id);
    if (!canRetry(op.status)) throw retryNotAllowed(op.status, shownRetryRule(op));
    const original = await findExecution(this.db.manager, op.executionId, principal.tenantId);
    if (!original) throw Problem.notFound('Operation', id);
    // What the retry stores again, as a submission of it would be judged now (refused below, after the 409s).
    const refusedNow = await this.errorsUnderTenantSettings(principal, op, original);
    const executionId = newId('exe');
    const operationId = newId('op');
    try {
      await transaction(this.db, async (tx) => {
        // A key revoked since the request was admitted makes no retry (and one revoked later waits for this one).
        if (!(await lockActiveKey(tx, principal.keyId))) throw Problem.keyRevokedMidRequest();
        // Judged again under the original's lock: what its source showed after it ended may refute "no effect exists".
        const locked = await lockRetried(tx, principal.tenantId, op.id);
        if (!locked) throw Problem.notFound('Operation', id);
        if (!canRetry(locked.status)) throw retryNotAllowed(locked.status);
        // Retries of one operation take turns on its lock: one made before this one is found here, so this one ends
        // without touching the unique index (where it would wait on, and could deadlock with, a worker's write of
        // that retry operation). The index stays what decides.
        const earlier = await findRetryOf(tx, principal.tenantId, op.id);
        if (earlier) throw alreadyRetried(op, earlier);
        if (retryRefusedByAcknowledgement({ status: locked.status, acknowledged: locked.acknowledgedAt !== null })) {
          // The provider acknowledged the send after it ended FAILED (a 2xx that came back late): it took it.
          throw effectExists(
            `the provider acknowledged ${op.id} after it was recorded FAILED: a retry could make the effect twice`,
            { kind: 'stored', evidence: op.evidence },
            {
              acknowledged_at: locked.acknowledgedAt!.toISOString(),
              provider_ref: locked.providerRef,
              current_status: locked.status,
              // Refuted: what the operation itself now shows (operationRetryRule), not its status' `safe`.
              retry: operationRetryRule({ status: locked.status, failureRefuted: true }),
            },
          );
        }
        if (retryRefusedByLaterRead(locked.readsAfterFailed.map((read) => read.result))) {
          const shown = locked.readsAfterFailed.filter((read) => readShowsTheEffect(read.result)).at(-1)!;
          throw effectExists(
            `a read of the source after ${op.id} was resolved FAILED showed the effect: a retry could make it twice`,
            { kind: shown.result, evidence: shown.evidence },
            {
              current_status: locked.status,
              retry: operationRetryRule({ status: locked.status, failureRefuted: true }),
            },
          );
        }
        // Reviewers denied this request as many times as one may be (its chain of retries, it included): a retry would
        // ask them again for what they refused. The chain is settled (each link ended), so this read stays true.
        const chain = (await retryChainsOf(tx, principal.tenantId, [op])).get(op.id);
        if (denialLimitReached(chain?.denials ?? 0, chain?.uncounted))
          throw denialLimitProblem(op, locked.status, chain!);
        // A retry is a new operation submitted now: params the connector's rules refuse today (accepted before the
        // rule) and an amount the tenant's cap cannot count (not a positive number of its places, or another currency)
        // are refused as intake refuses them, not written to be sent as they were or cancelled at dispatch (after
        // asking a reviewer to approve it, where it needs approval). One indexed read of the tenant's caps.
        const connector = this.connectors.require(op.connector);
        const refused = [
          ...refusedNow,
          ...operationParamsErrors(connector, op, 'params'),
          ...operationCapAmountErrors(op, await amountCapsOf(tx, principal.tenantId, [op.connector]), 'params'),
        ];
        if (refused.length > 0) throw Problem.validation(refused);
        const written = await insertExecution(tx, {
          id: executionId,
          tenantId: principal.tenantId,
          agentId: original.agentId,
          // Cut to intake's length, never between the halves of a character (the half left would be stored as U+FFFD).
          intent: textPrefix(`Retry of ${op.id} (${op.key}) from ${original.id}: ${original.intent}`, LIMITS.intent),
          deadlineSeconds: retryDeadlineSeconds(original),
          criteria: [],
          idempotencyKey: null,
          createdEventId: newId('evt'),
          // Who decided to make the effect again: its key, on the new execution's first event.
          requestedBy: principal.keyId,
          traceParent: currentTraceparent(),
          operations: [
            {
              id: operationId,
              ...requestedOperation(op),
              position: 0,
              depends_on: [],
              approval: null,
              resend_ref: resendReference(connector, op.action, op.params)?.value ?? null,
            },
          ],
        });
        // Another send of its reference is unsettled (a provider that does not deduplicate): the retry would re-send it.
        if (typeof written === 'object' && written !== null && 'unsettled' in written) {
          throw referenceUnsettled(
            connector,
            { action: op.action, params: op.params, field: 'params' },
            written.unsettled,
          );
        }
        // Judged in the statement that writes the link: a FAILED up the chain this retry joins (this one, or one it
        // was itself made on the word of) contradicted since would have the retry cancelled at send (retry_refuted).
        if (!(await setRetryOf(tx, principal.tenantId, operationId, op.id))) {
          throw effectExists(
            `${op.id} is a retry made on the word of a FAILED that was contradicted since (the provider took it, or ` +
              'its source showed the effect): a retry of it could make the effect twice',
            { kind: 'stored', evidence: op.evidence },
            {
              current_status: locked.status,
              retry: operationRetryRule({ status: locked.status, failureRefuted: false, retryRefuted: true }),
            },
          );
        }
      });
    } catch (error) {
      // The unique index (one retry per operation) refused a retry that raced past the look under the lock.
      if (isUniqueViolation(error)) {
        throw alreadyRetried(op, await findRetryOf(this.db.manager, principal.tenantId, op.id));
      }
      throw error;
    }
    // Read before its job is enqueued: read after, a quick dispatcher had sometimes already sent it, and the answer
    // showed a move the retry did not make (SENT in a 201 that says what was written).
    const execution = await findExecution(this.db.manager, executionId, principal.tenantId);
    const created = await findOperation(this.db.manager, operationId, principal.tenantId);
    // The earlier attempts it follows (the one retried, and that one's own chain), as every read of it shows them.
    const chains = await retryChainsOf(this.db.manager, principal.tenantId, [created!]);
    await this.producer.tryEnqueue(JobName.ADVANCE_EXECUTION, { executionId });
    return {
      // A new PREPARED operation: it has made no move yet.
      operation: presentOperation(created!, null, [], false, false, chains.get(operationId)),
      execution: presentExecution(execution!, [created!], new Map(), new Map(), undefined, new Set(), chains),
    };
  }
}

/**
 * 409 already-retried: one retry per operation (a second one of the same FAILED operation would make its effect
 * twice). The rule and the status are given as for retry-not-allowed, and which operation the earlier retry made: a
 * caller whose retry timed out finds it here, not by searching.
 */
function alreadyRetried(op: OperationEntity, retry: { operationId: string; executionId: string } | null): Problem {
  return Problem.conflict('already-retried', `operation ${op.id} was already retried`, {
    retry: retryRuleOf(op.status),
    current_status: op.status,
    ...(retry && { retried_by: { operation_id: retry.operationId, execution_id: retry.executionId } }),
  });
}

/**
 * 409 denial-limit-reached (rule `denial_limit`): reviewers denied the operation's request DENIAL_LIMIT times (it and
 * its earlier attempts, `retry_of` followed back); a retry would put the same request to them again. Its earlier
 * attempts, who denied each and why, are on the operation (`earlier_attempts`). A chain longer than the RETRY_CHAIN_DEPTH
 * links its denials are counted over is refused too (`uncounted`): retries cancelled unsent would otherwise push the
 * denials out of the count; `denials` is then those counted.
 */
function denialLimitProblem(
  op: OperationEntity,
  status: OperationStatus,
  chain: Pick<RetryChain, 'denials' | 'uncounted'>,
): Problem {
  const { denials } = chain;
  return Problem.conflict(
    'denial-limit-reached',
    chain.uncounted
      ? `the request of operation ${op.id} was retried more than ${RETRY_CHAIN_DEPTH} times: its denials are counted ` +
          `over its last ${RETRY_CHAIN_DEPTH} attempts only (${denials} there), so no retry of it is taken`
      : `the request of operation ${op.id} was denied ${denials} times (itself and its earlier attempts): a retry ` +
          'would ask reviewers for it again',
    { current_status: status, retry: RetryRule.FORBIDDEN, rule: 'denial_limit', denials, limit: DENIAL_LIMIT },
  );
}

/**
 * 409 retry-not-allowed: the retry rule of the operation's status forbids a new attempt (I5). `rule` is the one the
 * operation shows, where that is known (a VERIFIED a late rejection contradicts shows `forbidden`, not `not_needed`).
 */
function retryNotAllowed(status: OperationStatus, rule: RetryRule = retryRuleOf(status)): Problem {
  return Problem.conflict('retry-not-allowed', `retry is ${rule} for an operation in ${status}`, {
    current_status: status,
    retry: rule,
  });
}

/**
 * 409 resolution-not-permitted when a "still unknown" with `evidence` would take the evidence a hold's investigations
 * keep past MAX_INVESTIGATION_BYTES_PER_HOLD (bytes of UTF-8, as stored); null otherwise, or when it is no longer held.
 * `investigation_bytes` is what the hold's investigations already keep: a shorter statement may still fit.
 */
function investigationBytesRefusal(op: OperationEntity, evidence: string): Problem | null {
  if (op.status !== OperationStatus.MANUAL_REVIEW || !op.obligation) return null;
  const investigations = op.obligation.investigations ?? [];
  const used = investigations.reduce((sum, i) => sum + Buffer.byteLength(i.evidence), 0);
  const adds = Buffer.byteLength(evidence);
  if (used + adds <= MAX_INVESTIGATION_BYTES_PER_HOLD) return null;
  const room = Math.max(0, MAX_INVESTIGATION_BYTES_PER_HOLD - used);
  return Problem.conflict(
    'resolution-not-permitted',
    `this hold's investigations already keep ${used} bytes of evidence and this one is ${adds} more (at most ` +
      `${MAX_INVESTIGATION_BYTES_PER_HOLD} together${room > 0 ? `; ${room} are left` : ''}): resolve it, or leave ` +
      'it to its escalation, rather than re-dating it again',
    {
      current_status: op.status,
      investigations: investigations.length,
      investigation_bytes: used,
      investigation_bytes_limit: MAX_INVESTIGATION_BYTES_PER_HOLD,
    },
  );
}

/**
 * 412 for a decision made on a version of the operation that is no longer current (its If-Match names others): what
 * its author saw is not what it would now be applied to — a second hold, an approval asked for again. Nothing written.
 */
function refuseStale(ifMatch: readonly string[] | undefined, version: string): void {
  if (ifMatch !== undefined && !ifMatch.includes(version)) throw preconditionFailed('the operation', version);
}

/**
 * Why a decision with If-Match was not written: a decision made first stands as the answer (409 already-decided naming
 * it, I13: of concurrent decisions on one version, one is written and the others are told who won); any other refusal
 * of a request whose version is no longer current is 412, naming the current one.
 */
function unlessStale(refusal: Problem, ifMatch: readonly string[] | undefined, version: string): Problem {
  if (refusal.code === 'already-decided' || ifMatch === undefined || ifMatch.includes(version)) return refusal;
  return preconditionFailed('the operation', version);
}

function isDecided(approval: Approval | null): boolean {
  return approval?.state === 'granted' || approval?.state === 'denied';
}

/**
 * 409 effect-exists for a FAILED refused because a record of the effect is on file — the hold's own read found it
 * (INTEGRITY_MISMATCH, FIELD_MISSING), a re-check's read showed it, or the provider acknowledged it: what was read, and
 * the acknowledgement, whatever a read shows now. Not for any other refused FAILED: an operation never sent has no
 * effect to show, only a release or a cancel.
 */
function recordOnFile(op: OperationEntity, detail: string): Problem {
  const shown = op.obligation?.effect_shown;
  return effectExists(
    detail,
    shown ? { kind: shown.result, evidence: shown.evidence } : { kind: 'stored', evidence: op.evidence },
    op.acknowledgedAt ? { acknowledged_at: op.acknowledgedAt.toISOString(), provider_ref: op.providerRef } : {},
  );
}

/**
 * 409 resolution-not-permitted for a VERIFIED refused because the provider's rejection of the send is on file (a 4xx
 * that came back after the send was marked UNKNOWN): when it came and what it said, and what may be done instead.
 * Nothing was written.
 */
function rejectionOnFile(op: OperationEntity, why: string, options: ResolutionOption[]): Problem {
  return Problem.conflict('resolution-not-permitted', `VERIFIED is not permitted: ${why}`, {
    current_status: op.status,
    permitted_resolutions: offeredResolutions(options),
    resolution_options: options,
    rejected_at: op.rejectedAt!.toISOString(),
    rejection: op.rejection,
  });
}

/** I14: 409 effect-exists, with what the source showed (and any other record on file). Nothing was written. */
function effectExists(
  detail: string,
  read: { kind: string; evidence?: unknown },
  onFile: Record<string, unknown> = {},
): Problem {
  return Problem.conflict('effect-exists', detail, {
    read_back: { kind: read.kind, evidence: read.evidence ?? null },
    ...onFile,
  });
}

/**
 * A retry's execution has as long as the original's had (its deadline_seconds, or the default it got): a retry of an operation
 * that needs approval, or waits on a slow provider, is not cut shorter than what the agent asked for the first time.
 */
function retryDeadlineSeconds(original: { createdAt: Date; deadlineAt: Date }): number {
  const asked = Math.round((original.deadlineAt.getTime() - original.createdAt.getTime()) / 1000);
  const { min, max } = LIMITS.deadlineSeconds;
  return Math.min(max, Math.max(min, asked));
}
