/**
 * Outcome evaluation (docs/semantics.md): the criteria an agent declared, judged against the operations' current state.
 * Pure: the caller supplies each referenced operation and the event that made its last move; evaluation runs again
 * whenever a referenced operation changes, also after the execution completed (a reviewer's later resolution).
 */
import { LastStatusChange } from './failure';
import { readEvidenceField, sameJson, withKeptMemberNames } from './json-path';
import { OperationStatus, VerificationMethodValue, isFinalOperation } from './operation';

export interface StatusCriterion {
  key: string;
  operation: string;
  expect_status: OperationStatus;
}

export interface EvidenceCriterion {
  key: string;
  operation: string;
  /** A JSON path into the operation's evidence (e.g. `record.amount`) and the value it must hold. */
  expect_evidence: { path: string; equals: unknown };
}

export type Criterion = StatusCriterion | EvidenceCriterion;

export type CriterionVerdict = 'pass' | 'fail' | 'pending' | 'not_applicable';
export const CRITERION_VERDICTS: readonly CriterionVerdict[] = ['pass', 'fail', 'pending', 'not_applicable'];

export type OutcomeResult = 'satisfied' | 'unmet' | 'pending';
export const OUTCOME_RESULTS: readonly OutcomeResult[] = ['satisfied', 'unmet', 'pending'];

export interface Outcome {
  result: OutcomeResult;
  /** When the verdicts were last written (before the first evaluation: the submission, `unevaluatedCriteria`). */
  evaluated_at: string;
}

export interface OperationForCriterion {
  status: OperationStatus;
  verificationMethod: VerificationMethodValue;
  evidence: Record<string, unknown> | null;
  /** The move that brought it to its status (its cause tells a never-needed operation apart). */
  lastChange: LastStatusChange | null;
  /**
   * What was recorded since contradicts its final status (`failureRefuted`, `verificationContradicted`: a VERIFIED whose
   * send the provider rejected, a FAILED the provider acknowledged or a read showed): its commit is unknown.
   */
  contradicted?: boolean;
}

export interface CriterionEvaluation {
  verdict: CriterionVerdict;
  rationale: string;
  /**
   * The verdict is `fail` because what was recorded since contradicts the status that would pass it: its evidence is
   * that record (the late answer, or the read), beside the move that put the operation where it is.
   */
  contradicted?: true;
}

/** Nothing automatic or human can move it any more (a MANUAL_REVIEW still awaits a person). */
function isFinal(op: OperationForCriterion): boolean {
  return isFinalOperation(op.status, op.verificationMethod);
}

/**
 * pass / fail once the operation can no longer move; pending while it can (including MANUAL_REVIEW: a reviewer owes
 * the answer); not_applicable when the operation was never needed — absent from the execution, or cancelled before
 * sending because a dependency failed — unless it expects that very status. An `expect_status` that already holds
 * passes at once (and is judged again if the operation moves on). An `expect_evidence` is judged on VERIFIED evidence only: evidence that establishes the
 * effect, by read-back or by a reviewer.
 */
export function evaluateCriterion(criterion: Criterion, op: OperationForCriterion | undefined): CriterionEvaluation {
  const judged = judgeCriterion(criterion, op);
  // A criterion the status on record would satisfy is not satisfied by a record that is contradicted since: the agent
  // would act on an effect the provider's own answer (or the source) disputes. It can no longer move, so not pending.
  if (judged.verdict === 'pass' && op?.contradicted) {
    return {
      verdict: 'fail',
      rationale:
        `"${criterion.operation}" is ${op.status}, but what was recorded since contradicts it ` +
        '(the provider answered otherwise, or the source showed otherwise): whether its effect committed is unknown',
      contradicted: true,
    };
  }
  return judged;
}

function judgeCriterion(criterion: Criterion, op: OperationForCriterion | undefined): CriterionEvaluation {
  if (!op) return { verdict: 'not_applicable', rationale: `no operation "${criterion.operation}" in this execution` };
  // An expectation that holds passes first: "not sent when the charge fails" (`expect_status: "CANCELLED"`) is met by
  // exactly the cancel that makes any other expectation of the operation not applicable.
  if ('expect_status' in criterion && op.status === criterion.expect_status) {
    return { verdict: 'pass', rationale: `"${criterion.operation}" is ${op.status}` };
  }
  if (op.status === OperationStatus.CANCELLED && op.lastChange?.cause === 'dependency_not_done') {
    return {
      verdict: 'not_applicable',
      rationale: `"${criterion.operation}" was never needed: cancelled before sending because a dependency did not happen`,
    };
  }
  if ('expect_status' in criterion) {
    return isFinal(op)
      ? {
          verdict: 'fail',
          rationale: `"${criterion.operation}" ended ${op.status}, expected ${criterion.expect_status}`,
        }
      : {
          verdict: 'pending',
          rationale: `"${criterion.operation}" is ${op.status} and can still move (expected ${criterion.expect_status})`,
        };
  }
  const { path, equals } = criterion.expect_evidence;
  if (op.status !== OperationStatus.VERIFIED) {
    return isFinal(op)
      ? {
          verdict: 'fail',
          rationale: `"${criterion.operation}" ended ${op.status}: no verified evidence to check ${path}`,
        }
      : { verdict: 'pending', rationale: `"${criterion.operation}" is ${op.status}: its evidence is not verified yet` };
  }
  const read = readEvidenceField(op.evidence ?? {}, path);
  if (!read.found) return { verdict: 'fail', rationale: `the verified evidence has no ${path}` };
  // The evidence is kept with a target's marker-named members escaped (keptMemberName): so is what it is compared with.
  return sameJson(read.value, withKeptMemberNames(equals))
    ? { verdict: 'pass', rationale: `evidence ${path} is ${JSON.stringify(read.value)}` }
    : {
        verdict: 'fail',
        rationale: `evidence ${path} is ${JSON.stringify(read.value)}, expected ${JSON.stringify(equals)}`,
      };
}

/** unmet if any criterion failed; pending while any can still change; satisfied otherwise (not_applicable is no failure). */
export function outcomeResult(verdicts: readonly CriterionVerdict[]): OutcomeResult {
  if (verdicts.includes('fail')) return 'unmet';
  return verdicts.includes('pending') ? 'pending' : 'satisfied';
}

/** The rationale of each verdict an execution shows before its criteria were first evaluated. */
export const NOT_EVALUATED_YET = 'not evaluated yet';

/**
 * What an execution with criteria shows until the first evaluation is written: each criterion pending, with no
 * evidence. Shown, never stored — the evaluator's compare-and-set writes the first verdicts over none, so an outcome
 * of null is what it finds; an outcome of null on the wire would read as "no criteria".
 */
export function unevaluatedCriteria<C extends Criterion>(
  criteria: readonly C[],
): (C & { verdict: CriterionVerdict; rationale: string; evidence_event_ids: string[] })[] {
  return criteria.map((criterion) => ({
    ...criterion,
    verdict: 'pending' as const,
    rationale: NOT_EVALUATED_YET,
    evidence_event_ids: [],
  }));
}
