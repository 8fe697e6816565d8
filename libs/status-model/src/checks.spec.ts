import { blocksResend, everSent, owedCheck } from './checks';
import { OperationStatus as S, VerificationMethod } from './operation';

describe('owed checks', () => {
  const rw = VerificationMethod.READ_AFTER_WRITE;
  it.each([
    [S.ACKNOWLEDGED, rw, false, 'verify'],
    [S.ACKNOWLEDGED, '', false, null],
    [S.UNKNOWN, rw, false, 'reconcile'],
    [S.RECONCILING, '', false, 'reconcile'],
    [S.MANUAL_REVIEW, rw, true, 'recheck'],
    [S.MANUAL_REVIEW, rw, false, null],
    [S.PREPARED, rw, false, null],
    [S.SENT, rw, false, null],
    [S.VERIFIED, rw, true, null],
    [S.FAILED, rw, false, null],
    [S.CANCELLED, rw, false, null],
  ] as const)('%s (method "%s", re-check scheduled %s) is owed %s', (status, verificationMethod, scheduled, owed) => {
    expect(owedCheck({ status, verificationMethod, recheckScheduled: scheduled })).toBe(owed);
  });
});

describe('ever sent', () => {
  it('is any attempt at all, whatever came of it', () => {
    expect(everSent({ attempt: 0 })).toBe(false);
    expect(everSent({ attempt: 1 })).toBe(true);
    expect(everSent({ attempt: 3 })).toBe(true);
  });
});

describe('blocks a re-send of its reference', () => {
  it.each([
    [S.SENT, 1, true],
    [S.UNKNOWN, 1, true],
    [S.RECONCILING, 2, true],
    [S.MANUAL_REVIEW, 1, true],
    // Held before it was ever sent (a knowledge conflict, an unreadable precondition): no effect can exist yet.
    [S.MANUAL_REVIEW, 0, false],
    // The provider took it: known, not blind.
    [S.ACKNOWLEDGED, 1, false],
    [S.VERIFIED, 1, false],
    [S.FAILED, 1, false],
    [S.CANCELLED, 0, false],
    [S.PREPARED, 0, false],
  ] as const)('%s at attempt %s: %s', (status, attempt, blocks) => {
    expect(blocksResend({ status, attempt })).toBe(blocks);
  });
});
