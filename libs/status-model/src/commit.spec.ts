import { COMMIT_RULES, COMMIT_VALUES, Commit, REJECTED_COMMIT_STATUSES, commitOf } from './commit';
import { OPERATION_STATUSES, OperationStatus, TerminalReason } from './operation';

const S = OperationStatus;

describe('commitOf (not_dispatched | committed | rejected | unknown; docs/semantics.md)', () => {
  it.each<[OperationStatus, boolean, Commit]>([
    [S.PREPARED, false, 'not_dispatched'],
    [S.CANCELLED, false, 'not_dispatched'],
    [S.VERIFIED, false, 'not_dispatched'],
    [S.VERIFIED, true, 'committed'],
    [S.FAILED, true, 'rejected'],
    [S.MANUAL_REVIEW, false, 'not_dispatched'],
    [S.MANUAL_REVIEW, true, 'unknown'],
    [S.SENT, true, 'unknown'],
    [S.ACKNOWLEDGED, true, 'unknown'],
    [S.UNKNOWN, true, 'unknown'],
    [S.RECONCILING, true, 'unknown'],
  ])('%s (ever sent: %s) → %s', (status, everSent, commit) => {
    expect(commitOf({ status, everSent })).toBe(commit);
  });

  it('a read-back that found the effect but broke an invariant is a committed result, not a prevented one', () => {
    expect(
      commitOf({ status: S.MANUAL_REVIEW, everSent: true, terminalReason: TerminalReason.INTEGRITY_MISMATCH }),
    ).toBe('committed');
  });

  it('names the statuses a spending cap’s amount does not count: rejected for any send and reason, unless refuted', () => {
    expect(REJECTED_COMMIT_STATUSES).toEqual([S.FAILED]);
    // The window's SQL reads only the status and the refutation: no rule that says rejected may ask for more.
    expect(COMMIT_RULES.filter((r) => r.commit === 'rejected')).toEqual([
      { status: S.FAILED, ever_sent: 'any', terminal_reason: 'any', commit: 'rejected' },
    ]);
    for (const status of REJECTED_COMMIT_STATUSES) {
      for (const everSent of [true, false]) {
        expect(commitOf({ status, everSent, terminalReason: TerminalReason.CONNECTOR_REJECTED })).toBe('rejected');
        expect(commitOf({ status, everSent, failureRefuted: true })).toBe('unknown');
      }
    }
  });

  it('a FAILED refuted since (a late 2xx, a later read showing the effect) is no longer rejected: unknown', () => {
    expect(commitOf({ status: S.FAILED, everSent: true, failureRefuted: true })).toBe('unknown');
    expect(commitOf({ status: S.FAILED, everSent: true, failureRefuted: false })).toBe('rejected');
    // Only a FAILED is refuted: the flag changes nothing for any other status.
    expect(commitOf({ status: S.VERIFIED, everSent: true, failureRefuted: true })).toBe('committed');
  });

  it('a VERIFIED the provider’s late rejection contradicts is no longer committed: unknown', () => {
    expect(commitOf({ status: S.VERIFIED, everSent: true, verificationContradicted: true })).toBe('unknown');
    expect(commitOf({ status: S.VERIFIED, everSent: true, verificationContradicted: false })).toBe('committed');
    // Only a VERIFIED is contradicted: the flag changes nothing for any other status.
    expect(commitOf({ status: S.FAILED, everSent: true, verificationContradicted: true })).toBe('rejected');
  });

  it('a deny is not dispatched, never rejected', () => {
    expect(commitOf({ status: S.CANCELLED, everSent: false, terminalReason: TerminalReason.DENIED })).toBe(
      'not_dispatched',
    );
  });

  it('has a rule for every status, sent or not, and only known values', () => {
    for (const status of OPERATION_STATUSES) {
      for (const everSent of [true, false]) {
        expect(
          COMMIT_RULES.some((r) => r.status === status && (r.ever_sent === 'any' || r.ever_sent === everSent)),
        ).toBe(true);
      }
    }
    for (const r of COMMIT_RULES) expect(COMMIT_VALUES).toContain(r.commit);
  });

  it('falls back to unknown for a status outside the table', () => {
    expect(commitOf({ status: 'LOST' as OperationStatus, everSent: true })).toBe('unknown');
  });
});
