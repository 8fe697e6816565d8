import { blocksResend, everSent, owedCheck, recheckDelayMs, unreadRecheckDelayMs } from './checks';
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

describe('re-check delays', () => {
  const limits = { backoffMs: 30_000, backoffMaxMs: 600_000 };

  it('double with each re-check, from the first set as the hold is made, up to the maximum', () => {
    expect([0, 1, 2, 3, 4, 5, 9].map((n) => recheckDelayMs(n, limits))).toEqual([
      30_000, 60_000, 120_000, 240_000, 480_000, 600_000, 600_000,
    ]);
    // A count below zero (a row written by hand) is the first.
    expect(recheckDelayMs(-2, limits)).toBe(30_000);
  });

  it('a re-check that could not read is not moved past the obligation’s due time while that is ahead', () => {
    // Due in 90 s, unread for 5 minutes: moved to the due time, not 5 minutes on (a connector deployed again meanwhile
    // reads the hold before it escalates, as the chain's own last re-check would have).
    expect(unreadRecheckDelayMs({ rechecks: 0, unreadForMs: 300_000, dueInMs: 90_000 }, limits)).toBe(90_000);
    // Due later than the wait: the wait, as without a due time.
    expect(unreadRecheckDelayMs({ rechecks: 0, unreadForMs: 300_000, dueInMs: 3_600_000 }, limits)).toBe(300_000);
    // Due already (escalated or about to be): the chain has no re-check past it to keep, the wait stands.
    expect(unreadRecheckDelayMs({ rechecks: 0, unreadForMs: 300_000, dueInMs: 0 }, limits)).toBe(300_000);
    expect(unreadRecheckDelayMs({ rechecks: 0, unreadForMs: 300_000, dueInMs: -5_000 }, limits)).toBe(300_000);
  });

  it('a re-check that could not read waits as long again as the hold went unread, at least its next read’s delay', () => {
    // Unread for less than the next read's delay: that delay (as every postponement was before).
    expect(unreadRecheckDelayMs({ rechecks: 0, unreadForMs: 10_000 }, limits)).toBe(60_000);
    expect(unreadRecheckDelayMs({ rechecks: 2, unreadForMs: 0 }, limits)).toBe(240_000);
    // Longer: as long again, so consecutive unread re-checks run when due double the wait.
    let unreadFor = 60_000;
    const waits: number[] = [];
    for (let i = 0; i < 5; i += 1) {
      const wait = unreadRecheckDelayMs({ rechecks: 0, unreadForMs: unreadFor }, limits);
      waits.push(wait);
      unreadFor += wait;
    }
    expect(waits).toEqual([60_000, 120_000, 240_000, 480_000, 600_000]);
    // Never more than the maximum, however long unread (a hold left a week with its connector gone).
    expect(unreadRecheckDelayMs({ rechecks: 0, unreadForMs: 7 * 86_400_000 }, limits)).toBe(600_000);
  });
});
