import { canStillChange, isOutcomeCurrent, lateReadUntil } from './change';
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

describe('lateReadUntil', () => {
  const now = new Date('2026-01-01T12:00:00Z');
  const resolvedAt = (ms: number, status = 'FAILED') => ({
    status,
    obligation: { resolution: { status, at: new Date(now.getTime() - ms).toISOString() } },
  });

  it('is the end of the read window after the latest person’s FAILED still inside it', () => {
    expect(lateReadUntil([resolvedAt(1_000), resolvedAt(500)], 6_000, now)).toEqual(new Date(now.getTime() + 5_500));
  });

  it('is null once every window has passed, and for anything but a person’s FAILED', () => {
    expect(lateReadUntil([resolvedAt(6_000)], 6_000, now)).toBeNull();
    expect(lateReadUntil([resolvedAt(100, 'VERIFIED')], 6_000, now)).toBeNull();
    // FAILED by the system (no resolution), or a resolution without a time it was made.
    expect(lateReadUntil([{ status: 'FAILED', obligation: null }], 6_000, now)).toBeNull();
    expect(
      lateReadUntil([{ status: 'FAILED', obligation: { resolution: { status: 'FAILED' } } }], 6_000, now),
    ).toBeNull();
    expect(
      lateReadUntil([{ status: 'FAILED', obligation: { resolution: { status: 'FAILED', at: 'x' } } }], 6_000, now),
    ).toBeNull();
    expect(lateReadUntil([], 6_000, now)).toBeNull();
  });
});
