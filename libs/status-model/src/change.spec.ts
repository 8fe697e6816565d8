import { canStillChange, isOutcomeCurrent } from './change';
import { Criterion, OperationForCriterion, evaluateCriterion } from './outcome';
import { EXECUTION_STATUSES, ExecutionStatus, isTerminalExecution } from './execution';
import { OperationStatus, VerificationMethod } from './operation';

const S = OperationStatus;
const E = ExecutionStatus;
const RAW = VerificationMethod.READ_AFTER_WRITE;

describe('canStillChange', () => {
  const verified = { status: S.VERIFIED, verificationMethod: RAW } as const;

  it('holds for every execution status that is not terminal, whatever its operations (pending approvals included)', () => {
    for (const status of EXECUTION_STATUSES.filter((s) => !isTerminalExecution(s))) {
      expect(canStillChange(status, [verified])).toBe(true);
      expect(canStillChange(status, [])).toBe(true);
    }
  });

  it('holds for a completed execution with an operation held for a human: the resolution is still to come', () => {
    expect(canStillChange(E.COMPLETED, [verified, { status: S.MANUAL_REVIEW, verificationMethod: RAW }])).toBe(true);
  });

  it('holds for a cancelled or expired execution whose sent operation is still being reconciled', () => {
    for (const status of [S.SENT, S.ACKNOWLEDGED, S.UNKNOWN, S.RECONCILING]) {
      expect(canStillChange(E.CANCELLED, [{ status, verificationMethod: RAW }])).toBe(true);
      expect(canStillChange(E.EXPIRED, [{ status, verificationMethod: RAW }])).toBe(true);
    }
  });

  it('ends once the execution is terminal and every operation is final (ACKNOWLEDGED without read-back included)', () => {
    const ops = [verified, { status: S.ACKNOWLEDGED, verificationMethod: '' as const }];
    for (const status of [E.COMPLETED, E.FAILED, E.CANCELLED, E.EXPIRED]) {
      expect(canStillChange(status, ops)).toBe(false);
      expect(canStillChange(status, [{ status: S.CANCELLED, verificationMethod: RAW }])).toBe(false);
      expect(canStillChange(status, [])).toBe(false);
    }
  });
});

describe('isOutcomeCurrent', () => {
  const criteria: Criterion[] = [{ key: 'paid', operation: 'charge', expect_status: S.VERIFIED }];
  const op = (status: OperationStatus): OperationForCriterion => ({
    status,
    verificationMethod: RAW,
    evidence: null,
    lastChange: { from: null, at: new Date(0) },
  });
  const storedFor = (status: OperationStatus) => [{ key: 'paid', ...evaluateCriterion(criteria[0], op(status)) }];

  it('holds with no criteria, and when the stored verdicts are what the operations give now', () => {
    expect(isOutcomeCurrent([], null, () => undefined)).toBe(true);
    expect(isOutcomeCurrent(criteria, storedFor(S.VERIFIED), () => op(S.VERIFIED))).toBe(true);
  });

  it('is false while an evaluation is owed: nothing stored yet, or stored for the state before a resolution', () => {
    expect(isOutcomeCurrent(criteria, null, () => op(S.VERIFIED))).toBe(false);
    // Held: pending. Resolved VERIFIED by a reviewer, not evaluated yet.
    expect(isOutcomeCurrent(criteria, storedFor(S.MANUAL_REVIEW), () => op(S.VERIFIED))).toBe(false);
  });
});
