import { OperationStatus as S, TerminalReason as R } from './operation';
import { ReadBackDecision, ReadBackKind, ReadBackSituation, decideReadBack, decideReconcileStart } from './read-back';

const A = S.ACKNOWLEDGED;
const RC = S.RECONCILING;

function situation(
  status: ReadBackSituation['status'],
  read: ReadBackKind,
  extra: Partial<ReadBackSituation> = {},
): ReadBackSituation {
  return { status, read, absenceIsProof: false, checksBefore: 0, budget: 6, ...extra };
}

describe('decideReadBack: a table of situations and what the reconciler must do', () => {
  const table: [string, ReadBackSituation, ReadBackDecision][] = [
    ['verification finds the effect', situation(A, 'found'), { kind: 'verified' }],
    ['reconciliation finds the effect', situation(RC, 'found'), { kind: 'verified' }],
    [
      'a different effect is found (verification)',
      situation(A, 'mismatch'),
      { kind: 'hold', reason: R.INTEGRITY_MISMATCH },
    ],
    [
      'a different effect is found (reconciliation)',
      situation(RC, 'mismatch'),
      { kind: 'hold', reason: R.INTEGRITY_MISMATCH },
    ],
    ['absent inside the settle window: read again', situation(A, 'absent'), { kind: 'read-again' }],
    ['absent after the settle window: UNKNOWN', situation(A, 'absent', { absenceIsProof: true }), { kind: 'unknown' }],
    ['absent before it is proof: back to UNKNOWN', situation(RC, 'absent'), { kind: 'unknown-again' }],
    [
      'absent once it is proof: FAILED, proven absent',
      situation(RC, 'absent', { absenceIsProof: true }),
      { kind: 'failed', reason: R.PROVEN_ABSENT },
    ],
    ['a stale replica, budget left (verification)', situation(A, 'stale'), { kind: 'read-again' }],
    ['an unreachable source, budget left (reconciliation)', situation(RC, 'unreachable'), { kind: 'unknown-again' }],
    [
      'the last read the budget allows, stale',
      situation(A, 'stale', { checksBefore: 5 }),
      { kind: 'hold', reason: R.STALE_REPLICA },
    ],
    [
      'the last read the budget allows, field missing',
      situation(RC, 'field_missing', { checksBefore: 5 }),
      { kind: 'hold', reason: R.FIELD_MISSING },
    ],
    [
      'past the budget, unreachable',
      situation(RC, 'unreachable', { checksBefore: 9 }),
      { kind: 'hold', reason: R.SOURCE_UNREACHABLE },
    ],
    ['one read short of the budget', situation(A, 'unreachable', { checksBefore: 4 }), { kind: 'read-again' }],
  ];
  it.each(table)('%s', (_name, given, expected) => {
    expect(decideReadBack(given)).toEqual(expected);
  });

  it('never concludes FAILED from verification, nor from anything but a proven absence', () => {
    const reads: ReadBackKind[] = ['found', 'mismatch', 'absent', 'stale', 'field_missing', 'unreachable'];
    for (const status of [A, RC] as const) {
      for (const read of reads) {
        for (const absenceIsProof of [false, true]) {
          for (const checksBefore of [0, 5, 10]) {
            const decision = decideReadBack({ status, read, absenceIsProof, checksBefore, budget: 6 });
            if (decision.kind === 'failed') {
              expect({ status, read, absenceIsProof }).toEqual({ status: RC, read: 'absent', absenceIsProof: true });
            }
          }
        }
      }
    }
  });
});

describe('decideReconcileStart', () => {
  it.each([
    [{ canReadBack: true, deadlinePassed: false }, { kind: 'read' }],
    [
      { canReadBack: false, deadlinePassed: false },
      { kind: 'hold', reason: R.CONNECTOR_ERROR, why: 'no read-back' },
    ],
    [
      { canReadBack: false, deadlinePassed: true },
      { kind: 'hold', reason: R.CONNECTOR_ERROR, why: 'no read-back' },
    ],
    [
      { canReadBack: true, deadlinePassed: true },
      { kind: 'hold', reason: R.CONNECTOR_ERROR, why: 'deadline' },
    ],
  ])('%p → %p', (given, expected) => {
    expect(decideReconcileStart(given)).toEqual(expected);
  });
});
