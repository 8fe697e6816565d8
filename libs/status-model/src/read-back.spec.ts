import { OperationStatus as S, TerminalReason as R, VerificationMethod } from './operation';
import {
  ReadBackDecision,
  ReadBackKind,
  readShowsTheEffect,
  retryRefusedByLaterRead,
  retryRefusedByAcknowledgement,
  failureRefuted,
  ReadBackSituation,
  absenceEvidentAt,
  decideReadBack,
  decideReconcileStart,
  failedRefusedByRead,
  requiresUnacknowledged,
  requiresUnrejected,
  verificationContradicted,
  verifiedRefusedByRead,
} from './read-back';
import { absenceNotYetEvident, resolutionOptions } from './validate';

const A = S.ACKNOWLEDGED;
const RC = S.RECONCILING;

function situation(
  status: ReadBackSituation['status'],
  read: ReadBackKind,
  extra: Partial<ReadBackSituation> = {},
): ReadBackSituation {
  return {
    status,
    read,
    absenceIsProof: false,
    acknowledged: status === A,
    checksBefore: 0,
    budget: 6,
    sourceProvesAbsence: true,
    ...extra,
  };
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
    // An absence that cannot prove there is no effect, for either reason: read again while the budget lasts, then held
    // as a stale replica; never FAILED.
    ...(
      [
        ['acknowledged by the provider', { acknowledged: true }],
        ['a source the operation declared (http read_back)', { sourceProvesAbsence: false }],
        ['a source whose earlier read showed the record (it flaps, or lost it)', { effectShownBefore: true }],
      ] as const
    ).flatMap(([absenceProvesNothing, extra]): [string, ReadBackSituation, ReadBackDecision][] => [
      [
        `${absenceProvesNothing}, absent once it is proof, budget left: read again, never FAILED`,
        situation(RC, 'absent', { absenceIsProof: true, ...extra }),
        { kind: 'unknown-again' },
      ],
      [
        `${absenceProvesNothing}, absent on the last read the budget allows: held, STALE_REPLICA`,
        situation(RC, 'absent', { absenceIsProof: true, ...extra, checksBefore: 5 }),
        { kind: 'hold', reason: R.STALE_REPLICA },
      ],
    ]),
    [
      'a source the operation declared, found: VERIFIED as any other read',
      situation(RC, 'found', { sourceProvesAbsence: false }),
      { kind: 'verified' },
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

  it('never concludes FAILED from verification, nor from anything but a proven absence of an unacknowledged send at a source that can prove it', () => {
    const reads: ReadBackKind[] = ['found', 'mismatch', 'absent', 'stale', 'field_missing', 'unreachable'];
    for (const status of [A, RC] as const) {
      for (const read of reads) {
        for (const absenceIsProof of [false, true]) {
          for (const acknowledged of [false, true]) {
            for (const sourceProvesAbsence of [false, true]) {
              for (const effectShownBefore of [false, true]) {
                for (const checksBefore of [0, 5, 10]) {
                  const given = {
                    status,
                    read,
                    absenceIsProof,
                    acknowledged,
                    checksBefore,
                    budget: 6,
                    sourceProvesAbsence,
                    effectShownBefore,
                  };
                  if (decideReadBack(given).kind === 'failed') {
                    // Never an effect the provider acknowledged (its own answer contradicts the empty source), nor one
                    // an earlier read showed, and never from a source the operation declared.
                    expect({
                      status,
                      read,
                      absenceIsProof,
                      acknowledged,
                      sourceProvesAbsence,
                      effectShownBefore,
                    }).toEqual({
                      status: RC,
                      read: 'absent',
                      absenceIsProof: true,
                      acknowledged: false,
                      sourceProvesAbsence: true,
                      effectShownBefore: false,
                    });
                  }
                }
              }
            }
          }
        }
      }
    }
  });
});

describe('requiresUnacknowledged: the moves whose statement must find no acknowledgement on record', () => {
  it('is a proof of absence only', () => {
    expect(requiresUnacknowledged(S.FAILED, R.PROVEN_ABSENT)).toBe(true);
    expect(requiresUnacknowledged(S.FAILED, R.CONNECTOR_REJECTED)).toBe(false);
    expect(requiresUnacknowledged(S.FAILED, R.SOURCE_UNREACHABLE)).toBe(false);
    expect(requiresUnacknowledged(S.VERIFIED, null)).toBe(false);
    expect(requiresUnacknowledged(S.MANUAL_REVIEW, R.STALE_REPLICA)).toBe(false);
  });
});

describe('requiresUnrejected: the moves whose statement must find no rejection of the send on record', () => {
  it('is a person’s VERIFIED only', () => {
    expect(requiresUnrejected(S.VERIFIED, 'human')).toBe(true);
    expect(requiresUnrejected(S.VERIFIED, 'system')).toBe(false);
    expect(requiresUnrejected(S.FAILED, 'human')).toBe(false);
    expect(requiresUnrejected(S.SENT, 'human')).toBe(false);
  });
});

describe('verificationContradicted: a VERIFIED the provider’s late rejection contradicts', () => {
  it('is a VERIFIED with a rejection on file, and nothing else', () => {
    expect(verificationContradicted({ status: S.VERIFIED, rejected: true })).toBe(true);
    expect(verificationContradicted({ status: S.VERIFIED, rejected: false })).toBe(false);
    expect(verificationContradicted({ status: S.FAILED, rejected: true })).toBe(false);
    expect(verificationContradicted({ status: S.MANUAL_REVIEW, rejected: true })).toBe(false);
  });
});

describe('readShowsTheEffect: the reads after which nothing may say the effect did not happen (I14)', () => {
  it.each<[ReadBackKind, boolean]>([
    ['found', true],
    ['mismatch', true],
    // A record without the field that tells its state is still a record of the effect.
    ['field_missing', true],
    ['absent', false],
    ['stale', false],
    ['unreachable', false],
  ])('%s → %s', (read, shows) => {
    expect(readShowsTheEffect(read)).toBe(shows);
  });
});

describe('retryRefusedByLaterRead: a FAILED operation whose source showed the effect afterwards (I5, I14)', () => {
  it('is refused once any later read showed a record of the effect', () => {
    expect(retryRefusedByLaterRead(['absent', 'found'])).toBe(true);
    expect(retryRefusedByLaterRead(['mismatch'])).toBe(true);
    expect(retryRefusedByLaterRead(['field_missing'])).toBe(true);
  });
  it('is not refused by reads that show none, nor without any', () => {
    expect(retryRefusedByLaterRead([])).toBe(false);
    expect(retryRefusedByLaterRead(['absent', 'stale', 'unreachable'])).toBe(false);
  });
});

describe('retryRefusedByAcknowledgement: a FAILED operation the provider acknowledged afterwards (I5, I14)', () => {
  it('is refused when a late 2xx is on file', () => {
    expect(retryRefusedByAcknowledgement({ status: S.FAILED, acknowledged: true })).toBe(true);
  });
  it('is not refused without one, nor for a CANCELLED operation (never sent)', () => {
    expect(retryRefusedByAcknowledgement({ status: S.FAILED, acknowledged: false })).toBe(false);
    expect(retryRefusedByAcknowledgement({ status: S.CANCELLED, acknowledged: false })).toBe(false);
  });
});

describe('failureRefuted: a FAILED whose "no effect" was contradicted after it was recorded', () => {
  it.each([
    [{ acknowledged: true, effectShownAfter: false }, true],
    [{ acknowledged: false, effectShownAfter: true }, true],
    [{ acknowledged: true, effectShownAfter: true }, true],
    [{ acknowledged: false, effectShownAfter: false }, false],
  ])('FAILED with %o → %s', (evidence, refuted) => {
    expect(failureRefuted({ status: S.FAILED, ...evidence })).toBe(refuted);
  });
  it('only a FAILED can be refuted (an acknowledged VERIFIED or CANCELLED is no contradiction)', () => {
    expect(failureRefuted({ status: S.VERIFIED, acknowledged: true, effectShownAfter: false })).toBe(false);
    expect(failureRefuted({ status: S.CANCELLED, acknowledged: false, effectShownAfter: true })).toBe(false);
  });
});

describe('failedRefusedByRead: a reviewer’s FAILED and the read made when it is decided (I14)', () => {
  it.each<ReadBackKind>(['found', 'mismatch', 'field_missing'])(
    'a read that shows a record (%s) refuses it',
    (read) => {
      expect(failedRefusedByRead(read)).toBe('effect_shown');
      expect(failedRefusedByRead(read, false)).toBe('effect_shown');
    },
  );

  it('FAILED only on a read in which the source answers without the effect', () => {
    expect(failedRefusedByRead('absent')).toBeNull();
    // A person's "no effect" is not taken where the source could say and cannot now: not yet, not never.
    expect(failedRefusedByRead('unreachable')).toBe('source_unread');
    expect(failedRefusedByRead('stale')).toBe('source_unread');
    // A read not made at all (refused by the tenant's settings, or unbuildable): no source to wait for.
    expect(failedRefusedByRead('unreachable', false)).toBeNull();
  });
});

describe('verifiedRefusedByRead: a reviewer’s VERIFIED and the read made when it is decided', () => {
  const reads: ReadBackKind[] = ['found', 'mismatch', 'absent', 'stale', 'field_missing', 'unreachable'];

  it.each(reads)('%s: refuted exactly where reconciliation itself would conclude FAILED from the same read', (read) => {
    for (const sourceProvesAbsence of [true, false]) {
      for (const acknowledged of [true, false]) {
        for (const absenceIsProof of [true, false]) {
          const reconciliation = decideReadBack({
            status: RC,
            read,
            absenceIsProof,
            acknowledged,
            checksBefore: 0,
            budget: 5,
            sourceProvesAbsence,
          });
          const refusal = verifiedRefusedByRead(
            read,
            { sourceProvesAbsence, acknowledged, heldFor: R.SOURCE_UNREACHABLE },
            absenceIsProof,
          );
          expect(refusal === 'refuted').toBe(reconciliation.kind === 'failed');
        }
      }
    }
  });

  it('the provider’s own lookup answering without an effect it never acknowledged: not yet, then refuted', () => {
    const providersLookup = { sourceProvesAbsence: true, acknowledged: false, heldFor: R.SOURCE_UNREACHABLE };
    // A call may still land, or the provider not show it yet: what the lookup says now is no answer.
    expect(verifiedRefusedByRead('absent', providersLookup, false)).toBe('not_yet');
    expect(verifiedRefusedByRead('absent', providersLookup, true)).toBe('refuted');
    // An absence that proves nothing (a declared read-back), or one the provider's acknowledgement contradicts: a
    // person's evidence may settle it.
    for (const absenceEvident of [true, false]) {
      expect(
        verifiedRefusedByRead('absent', { ...providersLookup, sourceProvesAbsence: false }, absenceEvident),
      ).toBeNull();
      expect(verifiedRefusedByRead('absent', { ...providersLookup, acknowledged: true }, absenceEvident)).toBeNull();
      // Nor against a record the hold's own read found (with other values, or without its status): it is on file.
      for (const heldFor of [R.INTEGRITY_MISMATCH, R.FIELD_MISSING]) {
        expect(verifiedRefusedByRead('absent', { ...providersLookup, heldFor }, absenceEvident)).toBeNull();
      }
      // The effect shown, or a source that cannot be read now, says nothing against the evidence.
      expect(verifiedRefusedByRead('found', providersLookup, absenceEvident)).toBeNull();
      expect(verifiedRefusedByRead('unreachable', providersLookup, absenceEvident)).toBeNull();
    }
  });
});

describe('decideReconcileStart', () => {
  const RAW = VerificationMethod.READ_AFTER_WRITE;
  it.each([
    [{ canReadBack: true, verificationMethod: RAW, deadlinePassed: false }, { kind: 'read' }],
    [
      { canReadBack: false, verificationMethod: RAW, deadlinePassed: false },
      { kind: 'hold', reason: R.CONNECTOR_ERROR, why: 'no read-back' },
    ],
    [
      { canReadBack: false, verificationMethod: RAW, deadlinePassed: true },
      { kind: 'hold', reason: R.CONNECTOR_ERROR, why: 'no read-back' },
    ],
    [
      { canReadBack: true, verificationMethod: RAW, deadlinePassed: true },
      { kind: 'hold', reason: R.CONNECTOR_ERROR, why: 'deadline' },
    ],
    // No verification asked for: no read can write VERIFIED, so none is made; a person settles it.
    [
      { canReadBack: true, verificationMethod: '' as const, deadlinePassed: false },
      { kind: 'hold', reason: R.CONNECTOR_ERROR, why: 'not verified' },
    ],
  ])('%p → %p', (given, expected) => {
    expect(decideReconcileStart(given)).toEqual(expected);
  });
});

describe('absenceEvidentAt: when an empty source becomes evidence that a sent operation did not happen', () => {
  const timings = { sendGraceMs: 500, connectorTimeoutMs: 1_000, settleWindowMs: 1_500 };
  const at = (ms: number) => new Date(Date.UTC(2026, 0, 1) + ms);
  it.each([
    ['marked UNKNOWN at once: the grace after SENT bounds the call start', at(0), at(100), at(500 + 2_500)],
    ['never marked UNKNOWN (held from ACKNOWLEDGED): the grace bounds it', at(0), null, at(500 + 2_500)],
    ['marked UNKNOWN late (a worker held the lock): the mark bounds it', at(0), at(8_000), at(8_000 + 2_500)],
  ])('%s', (_, sentAt, lastUnknownAt, expected) => {
    expect(absenceEvidentAt({ sentAt, lastUnknownAt }, timings)).toEqual(expected);
  });

  it.each([
    [
      'acknowledged late (a worker that held its lock called late): the acknowledgement bounds it',
      at(9_000),
      at(10_500),
    ],
    ['acknowledged early: the grace and timeout still bound it', at(200), at(500 + 2_500)],
  ])('%s', (_, acknowledgedAt, expected) => {
    expect(absenceEvidentAt({ sentAt: at(0), lastUnknownAt: null, acknowledgedAt }, timings)).toEqual(expected);
  });
});

describe('a reviewer’s FAILED of a sent operation waits for absenceEvidentAt; nothing else does', () => {
  const evident = new Date('2026-01-01T00:00:10.000Z');
  const before = new Date('2026-01-01T00:00:09.999Z');
  const held = { status: S.MANUAL_REVIEW, everSent: true, heldFor: R.CONNECTOR_ERROR, absenceEvidentAt: evident };
  it.each([
    ['sent, before the bound: FAILED waits', held, before, evident],
    ['sent, at the bound: FAILED is accepted', held, evident, null],
    [
      'never sent: there is no call to wait for',
      { ...held, everSent: false, heldFor: R.KNOWLEDGE_CONFLICT },
      before,
      null,
    ],
    [
      'FAILED refused for good (the source showed it): no wait to announce',
      { ...held, heldFor: R.INTEGRITY_MISMATCH },
      before,
      null,
    ],
    ['not held: nothing to resolve', { ...held, status: S.UNKNOWN }, before, null],
  ])('%s', (_, input, now, expected) => {
    expect(absenceNotYetEvident({ ...input, now })).toEqual(expected);
  });

  it('resolutionOptions shows FAILED refused until then, with the time, and VERIFIED permitted throughout', () => {
    const options = resolutionOptions({ ...held, canReadBack: false, now: before });
    expect(options.map((o) => [o.status, o.permitted])).toEqual([
      [S.VERIFIED, true],
      [S.FAILED, false],
      [S.SENT, false],
      [S.CANCELLED, false],
    ]);
    expect(options[1].why).toContain('until 2026-01-01T00:00:10.000Z');
    const later = resolutionOptions({ ...held, canReadBack: true, now: evident });
    expect(later[1]).toMatchObject({ status: S.FAILED, permitted: true, check: 'read_back' });
  });
});
