import { LastStatusChange } from './failure';
import { Criterion, OperationForCriterion, evaluateCriterion, outcomeResult, unevaluatedCriteria } from './outcome';
import { OperationStatus, VerificationMethod, VerificationMethodValue } from './operation';

const S = OperationStatus;
const RAW = VerificationMethod.READ_AFTER_WRITE;
const last = (cause?: string): LastStatusChange => ({ from: S.PREPARED, cause, at: new Date(0) });
const op = (
  status: OperationStatus,
  extra: { verificationMethod?: VerificationMethodValue; evidence?: Record<string, unknown>; cause?: string } = {},
): OperationForCriterion => ({
  status,
  verificationMethod: extra.verificationMethod ?? RAW,
  evidence: extra.evidence ?? null,
  lastChange: last(extra.cause),
});
const paid: Criterion = { key: 'paid', operation: 'charge', expect_status: S.VERIFIED };
const amount: Criterion = {
  key: 'amount',
  operation: 'charge',
  expect_evidence: { path: 'record.amount', equals: 1250 },
};

describe('evaluateCriterion', () => {
  describe('expect_status', () => {
    it.each([
      [S.VERIFIED, 'pass'],
      [S.FAILED, 'fail'],
      [S.CANCELLED, 'fail'],
      [S.PREPARED, 'pending'],
      [S.SENT, 'pending'],
      [S.ACKNOWLEDGED, 'pending'],
      [S.UNKNOWN, 'pending'],
      [S.RECONCILING, 'pending'],
      [S.MANUAL_REVIEW, 'pending'],
    ])('%s → %s', (status, verdict) => {
      const evaluation = evaluateCriterion(paid, op(status));
      expect(evaluation.verdict).toBe(verdict);
      expect(evaluation.rationale).toContain(status);
    });

    it('an ACKNOWLEDGED operation with nothing to read back has ended: fail', () => {
      expect(evaluateCriterion(paid, op(S.ACKNOWLEDGED, { verificationMethod: '' })).verdict).toBe('fail');
    });

    it('an expectation of the current status passes at once', () => {
      const held: Criterion = { key: 'held', operation: 'charge', expect_status: S.MANUAL_REVIEW };
      expect(evaluateCriterion(held, op(S.MANUAL_REVIEW)).verdict).toBe('pass');
    });
  });

  describe('expect_evidence', () => {
    it('passes on VERIFIED evidence holding the value', () => {
      const evaluation = evaluateCriterion(amount, op(S.VERIFIED, { evidence: { record: { amount: 1250 } } }));
      expect(evaluation).toEqual({ verdict: 'pass', rationale: 'evidence record.amount is 1250' });
    });

    it('fails on VERIFIED evidence holding another value, or none', () => {
      expect(evaluateCriterion(amount, op(S.VERIFIED, { evidence: { record: { amount: 1251 } } }))).toEqual({
        verdict: 'fail',
        rationale: 'evidence record.amount is 1251, expected 1250',
      });
      expect(evaluateCriterion(amount, op(S.VERIFIED)).verdict).toBe('fail');
    });

    it('passes on an http read-back’s value, kept under its field as written, at the natural path', () => {
      const status: Criterion = {
        key: 'ok',
        operation: 'charge',
        expect_evidence: { path: 'record.data.status', equals: 'ok' },
      };
      const verified = op(S.VERIFIED, { evidence: { field: 'data.status', record: { 'data.status': 'ok' } } });
      expect(evaluateCriterion(status, verified)).toEqual({
        verdict: 'pass',
        rationale: 'evidence record.data.status is "ok"',
      });
    });

    it("compares an equals naming a marker's member name with the evidence as kept (the target's escaped)", () => {
      const marked: Criterion = {
        key: 'marked',
        operation: 'charge',
        expect_evidence: { path: 'record.v', equals: { 'verity:cut': 1 } },
      };
      const kept = op(S.VERIFIED, { evidence: { record: { v: { 'verity:verity:cut': 1 } } } });
      expect(evaluateCriterion(marked, kept).verdict).toBe('pass');
      const cut = op(S.VERIFIED, { evidence: { record: { v: { 'verity:cut': 1 } } } });
      expect(evaluateCriterion(marked, cut).verdict).toBe('fail');
    });

    it('waits while the operation can still become VERIFIED (a matching hold is not proof yet)', () => {
      const held = op(S.MANUAL_REVIEW, { evidence: { record: { amount: 1250 } } });
      expect(evaluateCriterion(amount, held).verdict).toBe('pending');
    });

    it('fails once the operation ended without verified evidence', () => {
      expect(evaluateCriterion(amount, op(S.FAILED)).verdict).toBe('fail');
    });
  });

  describe('a final status contradicted since (its commit unknown)', () => {
    const contradicted = (status: OperationStatus, evidence?: Record<string, unknown>) => ({
      ...op(status, { evidence }),
      contradicted: true,
    });

    it('fails a criterion the status on record would satisfy, and says why', () => {
      const failed: Criterion = { key: 'declined', operation: 'charge', expect_status: S.FAILED };
      for (const [criterion, status] of [
        [paid, S.VERIFIED],
        [failed, S.FAILED],
      ] as const) {
        expect(evaluateCriterion(criterion, op(status)).verdict).toBe('pass');
        const judged = evaluateCriterion(criterion, contradicted(status));
        expect(judged.verdict).toBe('fail');
        expect(judged.rationale).toContain(`"charge" is ${status}, but what was recorded since contradicts it`);
        // Its evidence is the contradiction too, not only the move that would pass it.
        expect(judged.contradicted).toBe(true);
        expect(evaluateCriterion(criterion, op(status)).contradicted).toBeUndefined();
      }
      expect(evaluateCriterion(amount, contradicted(S.VERIFIED, { record: { amount: 1250 } })).verdict).toBe('fail');
    });

    it('leaves every other verdict as it was', () => {
      expect(evaluateCriterion(paid, contradicted(S.FAILED))).toEqual(evaluateCriterion(paid, op(S.FAILED)));
      expect(evaluateCriterion(amount, contradicted(S.VERIFIED, { record: { amount: 1 } }))).toEqual(
        evaluateCriterion(amount, op(S.VERIFIED, { evidence: { record: { amount: 1 } } })),
      );
    });
  });

  describe('not_applicable', () => {
    it('when the operation was never needed: cancelled because a dependency did not happen', () => {
      const evaluation = evaluateCriterion(paid, op(S.CANCELLED, { cause: 'dependency_not_done' }));
      expect(evaluation.verdict).toBe('not_applicable');
      expect(evaluation.rationale).toContain('never needed');
    });

    it('when the execution has no such operation', () => {
      expect(evaluateCriterion(paid, undefined).verdict).toBe('not_applicable');
    });

    it('but a criterion that expects CANCELLED passes: the operation is in the status it names', () => {
      const notSent: Criterion = { key: 'not_sent', operation: 'notify', expect_status: S.CANCELLED };
      const evaluation = evaluateCriterion(notSent, op(S.CANCELLED, { cause: 'dependency_not_done' }));
      expect(evaluation.verdict).toBe('pass');
      expect(evaluation.rationale).toBe('"notify" is CANCELLED');
    });

    it('but not when it was cancelled for another cause', () => {
      expect(evaluateCriterion(paid, op(S.CANCELLED, { cause: 'execution_cancelled' })).verdict).toBe('fail');
    });
  });
});

describe('outcomeResult', () => {
  it.each([
    [[], 'satisfied'],
    [['pass', 'not_applicable'], 'satisfied'],
    [['pass', 'pending'], 'pending'],
    [['pending', 'fail'], 'unmet'],
    [['fail'], 'unmet'],
  ] as const)('%j → %s', (verdicts, result) => {
    expect(outcomeResult(verdicts)).toBe(result);
  });
});

describe('unevaluatedCriteria', () => {
  it('shows each criterion pending, not evaluated yet, with no evidence: the outcome it gives is pending', () => {
    const shown = unevaluatedCriteria([paid, amount]);
    expect(shown).toEqual([
      { ...paid, verdict: 'pending', rationale: 'not evaluated yet', evidence_event_ids: [] },
      { ...amount, verdict: 'pending', rationale: 'not evaluated yet', evidence_event_ids: [] },
    ]);
    expect(outcomeResult(shown.map((c) => c.verdict))).toBe('pending');
  });
});
