import { everSent, owedCheck } from './checks';
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
