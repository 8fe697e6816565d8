import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import {
  CriterionResult,
  ExecutionEntity,
  OperationEntity,
  TransitionService,
  contradictedOnRecord,
  findExecutionForWorker,
  findLastContradictionsForWorker,
  findLastStatusChangesForWorker,
  findOperationsForWorker,
} from '@verity/persistence';
import { evaluateCriterion, latestByKey, outcomeResult } from '@verity/status-model';
import { DataSource } from 'typeorm';

/**
 * Live outcome evaluation: the criteria are judged again on every advance of the execution — which every change of
 * an operation triggers, also after the execution completed (a reviewer's resolution enqueues one) — and an
 * evaluation that changes a verdict (or its rationale) is written with its `outcome.evaluated` event. The rules are libs/status-model's.
 */
@Injectable()
export class OutcomeService {
  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly transitions: TransitionService,
  ) {}

  /**
   * True when a new evaluation was written. `execution` follows in memory. `clockOffsetMs` (the database's clock less
   * this process', already measured by the caller): `evaluated_at` is shown beside the events' times, stamped there.
   */
  async evaluate(execution: ExecutionEntity, operations: OperationEntity[], clockOffsetMs: number): Promise<boolean> {
    if (execution.criteria.length === 0) return false;
    let judged = operations;
    // A concurrent evaluator may have written first. Its evaluation may be of a later read of the operations than
    // this one (advances of one execution run side by side): judge again from the stored verdicts and then the
    // operations as they are now — read in that order, so the operations are at least as recent as what was stored —
    // never write this read's verdicts over the winner's.
    for (let attempt = 0; attempt < 3; attempt += 1) {
      if (attempt > 0) {
        const fresh = await findExecutionForWorker(this.db.manager, execution.id);
        if (!fresh) return false;
        execution.criteriaResults = fresh.criteriaResults;
        execution.outcome = fresh.outcome;
        judged = await findOperationsForWorker(this.db.manager, execution.id);
      }
      const results = await this.judge(execution, judged);
      // An operation moved after it was read (its last move, read after it, goes elsewhere): the verdict would be of
      // the status read and its evidence the move since. Judge again from a read of now.
      if (results === 'moved') continue;
      if (sameVerdicts(execution.criteriaResults, results)) return false;
      const outcome = {
        result: outcomeResult(results.map((r) => r.verdict)),
        evaluated_at: new Date(Date.now() + clockOffsetMs).toISOString(),
      };
      const written = await this.transitions.recordOutcome(this.db.manager, {
        executionId: execution.id,
        previous: execution.criteriaResults,
        results,
        outcome,
        data: {
          result: outcome.result,
          criteria: results.map((r) => ({
            key: r.key,
            verdict: r.verdict,
            rationale: r.rationale,
            evidence_event_ids: r.evidence_event_ids,
          })),
        },
      });
      if (written.won) {
        execution.criteriaResults = results;
        execution.outcome = outcome;
        return true;
      }
    }
    return false;
  }

  /**
   * Each criterion's verdict on the operations as given, or 'moved' when one of them moved since it was read: its last
   * move is read by a statement of its own, after the operations, and a verdict is of the status its evidence moved to.
   */
  private async judge(execution: ExecutionEntity, operations: OperationEntity[]): Promise<CriterionResult[] | 'moved'> {
    const latest = latestByKey(operations);
    const referenced = execution.criteria.flatMap((c) => latest.get(c.operation)?.id ?? []);
    const changes = await findLastStatusChangesForWorker(this.db.manager, referenced);
    if ([...latest.values()].some((op) => referenced.includes(op.id) && movedSince(op, changes.get(op.id)))) {
      return 'moved';
    }
    const contradicted = [...latest.values()].filter((op) => referenced.includes(op.id) && contradictedOnRecord(op));
    const contradictions = await findLastContradictionsForWorker(
      this.db.manager,
      contradicted.map((op) => op.id),
    );
    return execution.criteria.map((criterion) => {
      const op = latest.get(criterion.operation);
      const change = op ? (changes.get(op.id) ?? null) : null;
      const evaluation = evaluateCriterion(
        criterion,
        op && {
          status: op.status,
          verificationMethod: op.verificationMethod,
          evidence: op.evidence,
          lastChange: change,
          contradicted: contradictedOnRecord(op),
        },
      );
      // The evidence of a verdict is the move that put the operation where it is now, and — for a verdict that fails
      // because what was recorded since contradicts that move — the event that recorded the contradiction.
      const contradiction = evaluation.contradicted && op ? contradictions.get(op.id) : undefined;
      const evidence = [...(change ? [change.eventId] : []), ...(contradiction ? [contradiction] : [])];
      return {
        ...criterion,
        verdict: evaluation.verdict,
        rationale: evaluation.rationale,
        evidence_event_ids: evidence,
      };
    });
  }
}

/**
 * Recorded again when a verdict or its rationale changes. The rationale names where the operation stands ("is
 * MANUAL_REVIEW and can still move"), so the stored results never describe an older state than the log.
 */
function sameVerdicts(stored: CriterionResult[] | null, results: CriterionResult[]): boolean {
  if (!stored || stored.length !== results.length) return false;
  return results.every(
    (r, i) => stored[i].key === r.key && stored[i].verdict === r.verdict && stored[i].rationale === r.rationale,
  );
}

/** The operation's last move (read after it) took it elsewhere than the status it was read in: it moved since. */
function movedSince(op: OperationEntity, change: { to: string } | undefined): boolean {
  return change !== undefined && change.to !== op.status;
}
