import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { TenantConnectors, operationCapabilities } from '@verity/connectors';
import {
  ExecutionEntity,
  OperationEntity,
  absenceEvidenceOfMany,
  databaseNow as readDatabaseNow,
  findExecution,
  findLastStatusChanges,
  findOperations,
  loadTenantSettings,
  recordedResolution,
  refutedRetries,
  retriesRefuted,
  retryChainsOf,
  type RetryChain,
  type StatusChangeRecord,
} from '@verity/persistence';
import { VERITY_CONFIG, VerityConfig, callTimings } from '@verity/platform';
import {
  AbsenceAtTheSource,
  OperationStatus,
  ReleaseNeeds,
  ResolutionOption,
  dependenciesState,
  everSent,
  latestByKey,
  needsApproval,
  releaseGrantsApproval,
  resolutionOptions,
  tenantApprovalRules,
} from '@verity/status-model';
import { DataSource, EntityManager } from 'typeorm';
import { databaseNowForApprovals } from '../executions/approval-clock';

/** What a reviewer may do with one held operation now, and what that was judged against. */
export interface HoldJudgement {
  /** Every resolution, permitted or not, with why (`resolutionOptions`). */
  options: ResolutionOption[];
  /** From when a FAILED of a sent operation may be believed (null: never sent). */
  absenceEvidentAt: Date | null;
  /** The moment judged, by the database's clock where a sent operation's bound was read. */
  now: Date;
}

/** What a page of operations is shown with besides their rows (`presentExecution`, `presentOperation`). */
export interface PresentationInputs {
  /** Each operation's last move (`findLastStatusChanges`). */
  changes: Map<string, StatusChangeRecord>;
  /** Each held, undecided operation's judgement (`judge`). */
  judged: Map<string, HoldJudgement>;
  /** The database's clock now, where an approval request waits (`databaseNowForApprovals`). */
  databaseNow: Date | undefined;
  /** The retries whose chain holds a FAILED contradicted since (`retriesRefuted`). */
  refuted: Set<string>;
  /** The chains of retries of the retries and the denied (`retryChainsOf`): earlier attempts, denials. */
  chains: Map<string, RetryChain>;
}

/**
 * The one place the API works out which resolutions of a held operation are permitted now, for one operation (its
 * detail, a resolution) or a page of them (an execution, a review queue): every surface that shows a reviewer's actions
 * shows what `resolve` accepts at that moment, from the status model's `resolutionOptions` with the same inputs — the
 * source's capabilities, the record on file, when an absence becomes evidence, and what a release also needs.
 */
@Injectable()
export class ResolutionOptionsService {
  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly connectors: TenantConnectors,
    @Inject(VERITY_CONFIG) private readonly config: VerityConfig,
  ) {}

  /**
   * For each operation of `ops` that is held and unresolved, its judgement; the others have none (nothing is permitted:
   * not held, or its decision is made — a release waiting for the dispatcher included). `known`: executions and their
   * operations the caller has already read (an execution's page), so they are not read again. `db`: where to read the
   * rest — the caller's snapshot (readSnapshot), so the judgement is of the moment its operations were read.
   */
  async judge(
    tenantId: string,
    ops: readonly OperationEntity[],
    known: { executions?: readonly ExecutionEntity[]; operations?: readonly OperationEntity[] } = {},
    db: EntityManager = this.db.manager,
  ): Promise<Map<string, HoldJudgement>> {
    const open = ops.filter((op) => op.status === OperationStatus.MANUAL_REVIEW && !recordedResolution(op));
    if (open.length === 0) return new Map();
    const sent = open.filter((op) => everSent(op));
    const { evidentAt, databaseNow } = await absenceEvidenceOfMany(db, tenantId, sent, callTimings(this.config));
    const release = await this.releaseNeeds(
      tenantId,
      open.filter((op) => !everSent(op)),
      known,
      db,
    );
    return new Map(
      open.map((op) => {
        const absenceEvidentAt = evidentAt.get(op.id) ?? null;
        const options = resolutionOptions({
          status: op.status,
          everSent: everSent(op),
          heldFor: op.terminalReason,
          ...this.sourceChecks(op),
          absenceEvidentAt,
          now: databaseNow,
          release: release.get(op.id),
        });
        return [op.id, { options, absenceEvidentAt, now: databaseNow }];
      }),
    );
  }

  /**
   * Everything `ops` are shown with besides their rows, read on `db` (the caller's snapshot, readSnapshot): their last
   * moves, their judgements (`known` as for `judge`), the database's clock where an approval request waits, and the
   * retries refuted since. One after the other: `db` is a transaction's one connection.
   */
  async presentationInputs(
    tenantId: string,
    ops: readonly OperationEntity[],
    known: { executions?: readonly ExecutionEntity[]; operations?: readonly OperationEntity[] },
    db: EntityManager,
  ): Promise<PresentationInputs> {
    const changes = await findLastStatusChanges(
      db,
      ops.map((op) => op.id),
      tenantId,
    );
    const judged = await this.judge(tenantId, ops, known, db);
    const databaseNow = await databaseNowForApprovals(db, ops);
    const refuted = await retriesRefuted(db, tenantId, ops);
    const chains = await retryChainsOf(db, tenantId, ops);
    return { changes, judged, databaseNow, refuted, chains };
  }

  /** One operation's judgement, or null when nothing is permitted on it (not held, or decided). */
  async judgeOne(
    tenantId: string,
    op: OperationEntity,
    db: EntityManager = this.db.manager,
  ): Promise<HoldJudgement | null> {
    return (await this.judge(tenantId, [op], {}, db)).get(op.id) ?? null;
  }

  /** The connector can read this operation's effect back from the source. */
  canReadBack(op: OperationEntity): boolean {
    const connector = this.connectors.get(op.connector);
    return Boolean(connector?.readBack) && operationCapabilities(connector!, op.action, op.params).read_back;
  }

  absenceAtTheSource(op: OperationEntity): AbsenceAtTheSource {
    return {
      sourceProvesAbsence: this.connectors.get(op.connector)?.readBackProvesAbsence === true,
      acknowledged: op.acknowledgedAt !== null,
      heldFor: op.terminalReason,
    };
  }

  /** What a reviewer's resolutions are checked against: the source, and the record on file (resolutionOptions' inputs). */
  private sourceChecks(op: OperationEntity) {
    const { heldFor: _heldFor, ...absence } = this.absenceAtTheSource(op);
    return {
      canReadBack: this.canReadBack(op),
      effectShown: Boolean(op.obligation?.effect_shown),
      rejected: Boolean(op.rejectedAt),
      ...absence,
    };
  }

  /**
   * What a release (SENT) of each held, never-sent operation also needs, as it stands now: its execution's status and
   * whether its dependencies are done (the statement that commits the release checks both again).
   */
  private async releaseNeeds(
    tenantId: string,
    neverSent: readonly OperationEntity[],
    known: { executions?: readonly ExecutionEntity[]; operations?: readonly OperationEntity[] },
    db: EntityManager,
  ): Promise<Map<string, ReleaseNeeds>> {
    const needs = new Map<string, ReleaseNeeds>();
    // Retries on the word of a FAILED contradicted since: the send guard withdraws their release (retry_refuted).
    const refuted = await refutedRetries(
      db,
      tenantId,
      neverSent.filter((op) => op.retryOf !== null).map((op) => op.id),
    );
    let rules: ReturnType<typeof tenantApprovalRules> | undefined;
    // The deadline by the database's clock, the one the dispatcher judges it by (and an approval's statement checks it
    // with): by this host's, one behind offered and took a release nothing would ever carry out. Read once for the page.
    let databaseNow: number | undefined;
    const executions = new Map((known.executions ?? []).map((e) => [e.id, e]));
    const siblings = new Map<string, OperationEntity[]>();
    for (const op of known.operations ?? []) {
      siblings.set(op.executionId, [...(siblings.get(op.executionId) ?? []), op]);
    }
    for (const op of neverSent) {
      let execution = executions.get(op.executionId);
      if (!execution) {
        execution = (await findExecution(db, op.executionId, tenantId)) ?? undefined;
        if (!execution) continue;
        executions.set(execution.id, execution);
      }
      let ofExecution = siblings.get(op.executionId);
      if (op.dependsOn.length > 0 && !ofExecution) {
        ofExecution = await findOperations(db, op.executionId, tenantId);
        siblings.set(op.executionId, ofExecution);
      }
      const latest = latestByKey(op.dependsOn.length > 0 ? (ofExecution ?? []) : []);
      // The tenant's policy as it stands now, read once for the page: the release grants by the same rule (resolve).
      rules ??= tenantApprovalRules(
        await loadTenantSettings(db, tenantId),
        this.connectors.approvalAmountDeclarations(),
      );
      databaseNow ??= (await readDatabaseNow(db)).getTime();
      needs.set(op.id, {
        executionStatus: execution.status,
        // The statement that commits the release (the dispatcher's) judges it again, by the same clock.
        deadlinePassed: execution.deadlineAt.getTime() <= databaseNow,
        dependencies: dependenciesState(op.dependsOn.map((key) => latest.get(key))),
        grantsApproval: releaseGrantsApproval(needsApproval(op, rules), op.approval),
        retryRefuted: refuted.has(op.id),
      });
    }
    return needs;
  }
}
