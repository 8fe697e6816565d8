import { SENDABLE_EXECUTION_STATUSES, dependencyBroken, dependencySatisfied, nextPreconditionRead } from './dispatch';
import { ExecutionStatus } from './execution';
import { OperationStatus, VerificationMethod } from './operation';

const S = OperationStatus;

describe('dependencySatisfied', () => {
  it.each([
    [S.VERIFIED, VerificationMethod.READ_AFTER_WRITE, true],
    [S.VERIFIED, '', true],
    [S.ACKNOWLEDGED, '', true],
    [S.ACKNOWLEDGED, VerificationMethod.READ_AFTER_WRITE, false],
    [S.SENT, '', false],
    [S.PREPARED, '', false],
    [S.UNKNOWN, '', false],
    [S.MANUAL_REVIEW, '', false],
    [S.FAILED, '', false],
    [S.CANCELLED, '', false],
  ] as const)('%s with verification "%s" → %s', (status, verificationMethod, expected) => {
    expect(dependencySatisfied({ status, verificationMethod })).toBe(expected);
  });
});

describe('SENDABLE_EXECUTION_STATUSES', () => {
  it('is only running: a dispatch found waiting, planning or terminal is stray', () => {
    expect(SENDABLE_EXECUTION_STATUSES).toEqual([ExecutionStatus.RUNNING]);
  });
});

describe('nextPreconditionRead', () => {
  const limits = { budget: 4, backoffMs: 100, backoffMaxMs: 300 };
  const now = new Date('2030-01-01T00:00:00Z');
  const farDeadline = new Date('2030-01-02T00:00:00Z');

  it('reads again with exponential backoff, capped', () => {
    expect(nextPreconditionRead(0, limits, now, farDeadline)).toEqual({
      kind: 'retry',
      failedReads: 1,
      at: new Date(now.getTime() + 100),
    });
    expect(nextPreconditionRead(1, limits, now, farDeadline)).toMatchObject({ at: new Date(now.getTime() + 200) });
    expect(nextPreconditionRead(2, limits, now, farDeadline)).toMatchObject({ at: new Date(now.getTime() + 300) });
  });

  it('holds for a human once the budget is spent', () => {
    expect(nextPreconditionRead(3, limits, now, farDeadline)).toEqual({ kind: 'hold', failedReads: 4, why: 'budget' });
  });

  it('holds for a human when the next read could not happen before the deadline', () => {
    expect(nextPreconditionRead(0, limits, now, new Date(now.getTime() + 100))).toEqual({
      kind: 'hold',
      failedReads: 1,
      why: 'deadline',
    });
  });
});

describe('dependencyBroken', () => {
  it.each(Object.values(OperationStatus))('%s', (status) => {
    const broken = status === OperationStatus.FAILED || status === OperationStatus.CANCELLED;
    expect(dependencyBroken({ status })).toBe(broken);
  });

  it('a dependency that does not exist is broken', () => {
    expect(dependencyBroken(undefined)).toBe(true);
  });
});
