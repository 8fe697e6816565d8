import { IllegalTransitionError, StatusModelErrorCode } from './errors';
import { DependenciesState, heldNeverSent } from './dispatch';
import { ExecutionStatus } from './execution';
import {
  FINAL_OPERATION_STATUSES,
  FINAL_WITHOUT_READ_BACK_STATUSES,
  HOLDS_WITH_A_RECORD_ON_FILE,
  OPERATION_STATUSES,
  OPERATION_STATUS_INFO,
  OPERATION_TRANSITIONS,
  OperationStatus,
  RetryRule,
  TERMINAL_REASONS,
  TerminalReason,
  VerificationMethod,
  allowedOperationTargets,
  canRetry,
  DENIAL_LIMIT,
  denialLimitReached,
  isFinalOperation,
  isSettledOperation,
  isTerminalOperation,
  keepsTerminalReason,
  operationRetryRule,
  operationTransitionRule,
  retryRuleOf,
} from './operation';
import {
  OperationTransitionContext,
  ReleaseNeeds,
  ResolutionStatus,
  assertOperationTransition,
  isOperationTransitionAllowed,
  permittedResolutions,
  resolutionOptions,
  offeredResolutions,
  resolutionRefusedBy,
} from './validate';
import { moveKey as key, movesOutside, refusalOf as refusal } from '../../../test/support/transitions';

const S = OperationStatus;
const R = TerminalReason;
const C = StatusModelErrorCode;
const RAW = VerificationMethod.READ_AFTER_WRITE;
/** The contexts of an operation that can be read back, once sent and before it ever was. */
const SENT_CONTEXT = { verificationMethod: RAW, everSent: true } as const;
const UNSENT_CONTEXT = { verificationMethod: RAW, everSent: false } as const;

/** docs/contract.md §2, written out by hand so that the library's data is checked against the document, not against itself. */
const REFERENCE_BLOCK: ReadonlyArray<[OperationStatus, OperationStatus]> = [
  [S.PREPARED, S.SENT],
  [S.PREPARED, S.MANUAL_REVIEW],
  [S.PREPARED, S.CANCELLED],
  [S.SENT, S.ACKNOWLEDGED],
  [S.SENT, S.UNKNOWN],
  [S.SENT, S.FAILED],
  [S.ACKNOWLEDGED, S.VERIFIED],
  [S.ACKNOWLEDGED, S.UNKNOWN],
  [S.UNKNOWN, S.RECONCILING],
  [S.RECONCILING, S.VERIFIED],
  [S.RECONCILING, S.FAILED],
];
const EXTENSION_BLOCK: ReadonlyArray<[OperationStatus, OperationStatus]> = [
  [S.PREPARED, S.VERIFIED],
  [S.ACKNOWLEDGED, S.MANUAL_REVIEW],
  [S.RECONCILING, S.UNKNOWN],
  [S.RECONCILING, S.MANUAL_REVIEW],
  [S.UNKNOWN, S.MANUAL_REVIEW],
  [S.MANUAL_REVIEW, S.VERIFIED],
  [S.MANUAL_REVIEW, S.FAILED],
  [S.MANUAL_REVIEW, S.SENT],
  [S.MANUAL_REVIEW, S.CANCELLED],
];
const CONTRACT_TRANSITIONS = [...REFERENCE_BLOCK, ...EXTENSION_BLOCK];
const CONTRACT_KEYS = new Set(CONTRACT_TRANSITIONS.map(([from, to]) => key(from, to)));

interface AllowedCase {
  from: OperationStatus;
  to: OperationStatus;
  context: OperationTransitionContext;
}

/** Every allowed move with a context that satisfies its conditions. */
const ALLOWED: AllowedCase[] = [
  { from: S.PREPARED, to: S.SENT, context: UNSENT_CONTEXT },
  { from: S.PREPARED, to: S.MANUAL_REVIEW, context: { ...UNSENT_CONTEXT, terminalReason: R.KNOWLEDGE_CONFLICT } },
  { from: S.PREPARED, to: S.CANCELLED, context: UNSENT_CONTEXT },
  { from: S.SENT, to: S.ACKNOWLEDGED, context: SENT_CONTEXT },
  { from: S.SENT, to: S.UNKNOWN, context: { ...SENT_CONTEXT, terminalReason: R.CONNECTOR_ERROR } },
  { from: S.SENT, to: S.FAILED, context: { ...SENT_CONTEXT, terminalReason: R.CONNECTOR_REJECTED } },
  { from: S.ACKNOWLEDGED, to: S.VERIFIED, context: SENT_CONTEXT },
  { from: S.ACKNOWLEDGED, to: S.UNKNOWN, context: SENT_CONTEXT },
  { from: S.UNKNOWN, to: S.RECONCILING, context: SENT_CONTEXT },
  { from: S.RECONCILING, to: S.VERIFIED, context: SENT_CONTEXT },
  { from: S.RECONCILING, to: S.FAILED, context: { ...SENT_CONTEXT, terminalReason: R.PROVEN_ABSENT } },
  { from: S.PREPARED, to: S.VERIFIED, context: { ...UNSENT_CONTEXT, noChangeRequired: true } },
  { from: S.ACKNOWLEDGED, to: S.MANUAL_REVIEW, context: { ...SENT_CONTEXT, terminalReason: R.INTEGRITY_MISMATCH } },
  { from: S.RECONCILING, to: S.UNKNOWN, context: SENT_CONTEXT },
  { from: S.RECONCILING, to: S.MANUAL_REVIEW, context: { ...SENT_CONTEXT, terminalReason: R.CONNECTOR_ERROR } },
  { from: S.UNKNOWN, to: S.MANUAL_REVIEW, context: { ...SENT_CONTEXT, terminalReason: R.CONNECTOR_ERROR } },
  { from: S.MANUAL_REVIEW, to: S.VERIFIED, context: { ...SENT_CONTEXT, actor: 'human' } },
  { from: S.MANUAL_REVIEW, to: S.FAILED, context: { ...SENT_CONTEXT, actor: 'human' } },
  { from: S.MANUAL_REVIEW, to: S.SENT, context: { ...UNSENT_CONTEXT, actor: 'human' } },
  { from: S.MANUAL_REVIEW, to: S.CANCELLED, context: { ...UNSENT_CONTEXT, actor: 'human' } },
];

/** A context that satisfies every condition a rule can impose, so only the table itself can refuse. */
const PERMISSIVE: OperationTransitionContext = {
  actor: 'human',
  terminalReason: null,
  verificationMethod: RAW,
  everSent: false,
  noChangeRequired: true,
};

function expectRefused(
  from: OperationStatus,
  to: OperationStatus,
  context: OperationTransitionContext,
  code: StatusModelErrorCode,
) {
  const error = refusal(() => assertOperationTransition(from, to, context));
  expect(error.code).toBe(code);
  expect(error.kind).toBe('operation');
  expect(error.from).toBe(from);
  expect(error.to).toBe(to);
  expect(isOperationTransitionAllowed(from, to, context)).toBe(false);
}

describe('operation transition table (docs/contract.md §2)', () => {
  it('holds exactly the 20 transitions of the design, 11 reference and 9 extension', () => {
    expect(CONTRACT_TRANSITIONS).toHaveLength(20);
    expect(OPERATION_TRANSITIONS).toHaveLength(20);
    expect(new Set(OPERATION_TRANSITIONS.map((r) => key(r.from, r.to)))).toEqual(CONTRACT_KEYS);
    expect(OPERATION_TRANSITIONS.filter((r) => !r.extension).map((r) => [r.from, r.to])).toEqual(REFERENCE_BLOCK);
    expect(OPERATION_TRANSITIONS.filter((r) => r.extension).map((r) => [r.from, r.to])).toEqual(EXTENSION_BLOCK);
  });

  it('has no duplicate move and no self-loop', () => {
    const keys = OPERATION_TRANSITIONS.map((r) => key(r.from, r.to));
    expect(new Set(keys).size).toBe(keys.length);
    expect(OPERATION_TRANSITIONS.filter((r) => r.from === r.to)).toEqual([]);
  });

  it('gives every rule a reason to exist and keeps required reasons non-empty', () => {
    for (const r of OPERATION_TRANSITIONS) {
      expect(r.why.length).toBeGreaterThan(0);
      if (r.reasonRequired) expect(r.reasons.length).toBeGreaterThan(0);
      for (const reason of r.reasons) expect(TERMINAL_REASONS).toContain(reason);
    }
  });

  it('reserves exactly the MANUAL_REVIEW resolutions for a human, and SENT/CANCELLED from there for never-sent', () => {
    expect(OPERATION_TRANSITIONS.filter((r) => r.humanOnly).map((r) => key(r.from, r.to))).toEqual([
      key(S.MANUAL_REVIEW, S.VERIFIED),
      key(S.MANUAL_REVIEW, S.FAILED),
      key(S.MANUAL_REVIEW, S.SENT),
      key(S.MANUAL_REVIEW, S.CANCELLED),
    ]);
    expect(OPERATION_TRANSITIONS.filter((r) => r.neverSentOnly).map((r) => key(r.from, r.to))).toEqual([
      key(S.MANUAL_REVIEW, S.SENT),
      key(S.MANUAL_REVIEW, S.CANCELLED),
    ]);
  });

  it('sends no operation twice: from its first SENT, no path of the table reaches SENT again', () => {
    // The spending caps' ledger relies on it: a caps change writes the rows of operations already sent before it takes
    // the caps' lock, which a send of one of them would wait for while holding that lock (a deadlock).
    const reached = new Set<OperationStatus>([S.SENT]);
    const next = [S.SENT];
    for (let from = next.pop(); from !== undefined; from = next.pop()) {
      for (const r of OPERATION_TRANSITIONS.filter((rule) => rule.from === from && !rule.neverSentOnly)) {
        if (r.to === S.SENT) throw new Error(`${key(r.from, r.to)} sends an operation that was sent`);
        if (reached.has(r.to)) continue;
        reached.add(r.to);
        next.push(r.to);
      }
    }
    expect([...reached].sort()).toEqual(OPERATION_STATUSES.filter((s) => s !== S.PREPARED && s !== S.CANCELLED).sort());
  });

  it('covers every design transition in the allowed-case table below', () => {
    expect(new Set(ALLOWED.map((c) => key(c.from, c.to)))).toEqual(CONTRACT_KEYS);
  });

  describe.each(ALLOWED)('allows $from -> $to', ({ from, to, context }) => {
    it('with a valid context, returning the rule that allowed it', () => {
      const found = assertOperationTransition(from, to, context);
      expect(found.from).toBe(from);
      expect(found.to).toBe(to);
      expect(found).toBe(operationTransitionRule(from, to));
      expect(isOperationTransitionAllowed(from, to, context)).toBe(true);
    });

    it('with every reason the rule lists', () => {
      for (const reason of operationTransitionRule(from, to)!.reasons) {
        expect(() => assertOperationTransition(from, to, { ...context, terminalReason: reason })).not.toThrow();
      }
    });
  });

  describe('refuses moves outside the table with ILLEGAL_TRANSITION', () => {
    const sample: ReadonlyArray<[OperationStatus, OperationStatus]> = [
      [S.SENT, S.SENT],
      [S.ACKNOWLEDGED, S.SENT],
      [S.UNKNOWN, S.SENT],
      [S.RECONCILING, S.SENT],
      [S.UNKNOWN, S.FAILED],
      [S.UNKNOWN, S.VERIFIED],
      [S.UNKNOWN, S.ACKNOWLEDGED],
      [S.UNKNOWN, S.CANCELLED],
      [S.SENT, S.VERIFIED],
      [S.SENT, S.CANCELLED],
      [S.SENT, S.PREPARED],
      [S.SENT, S.MANUAL_REVIEW],
      [S.SENT, S.RECONCILING],
      [S.ACKNOWLEDGED, S.FAILED],
      [S.ACKNOWLEDGED, S.CANCELLED],
      [S.ACKNOWLEDGED, S.RECONCILING],
      [S.PREPARED, S.ACKNOWLEDGED],
      [S.PREPARED, S.UNKNOWN],
      [S.PREPARED, S.FAILED],
      [S.PREPARED, S.RECONCILING],
      [S.PREPARED, S.PREPARED],
      [S.RECONCILING, S.CANCELLED],
      [S.RECONCILING, S.ACKNOWLEDGED],
      [S.RECONCILING, S.RECONCILING],
      [S.MANUAL_REVIEW, S.PREPARED],
      [S.MANUAL_REVIEW, S.ACKNOWLEDGED],
      [S.MANUAL_REVIEW, S.UNKNOWN],
      [S.MANUAL_REVIEW, S.RECONCILING],
      [S.MANUAL_REVIEW, S.MANUAL_REVIEW],
      ...OPERATION_STATUSES.map((to): [OperationStatus, OperationStatus] => [S.VERIFIED, to]),
      ...OPERATION_STATUSES.map((to): [OperationStatus, OperationStatus] => [S.FAILED, to]),
      ...OPERATION_STATUSES.map((to): [OperationStatus, OperationStatus] => [S.CANCELLED, to]),
    ];

    it('the named sample is large enough and truly outside the design table', () => {
      expect(sample.length).toBeGreaterThanOrEqual(25);
      for (const [from, to] of sample) expect(CONTRACT_KEYS.has(key(from, to))).toBe(false);
    });

    it.each(sample)('%s -> %s', (from, to) => {
      expect(operationTransitionRule(from, to)).toBeUndefined();
      for (const context of [PERMISSIVE, { ...PERMISSIVE, actor: 'system' as const, everSent: true }]) {
        expectRefused(from, to, context, C.ILLEGAL_TRANSITION);
      }
    });

    it('every one of the 61 pairs outside the table, even under the most permissive context', () => {
      const outside = movesOutside(OPERATION_STATUSES, CONTRACT_KEYS);
      for (const [from, to] of outside) expectRefused(from, to, PERMISSIVE, C.ILLEGAL_TRANSITION);
      expect(outside).toHaveLength(81 - 20);
    });
  });

  describe('reasons', () => {
    const required = OPERATION_TRANSITIONS.filter((r) => r.reasonRequired);

    it('are required exactly where the design names a cause', () => {
      expect(required.map((r) => key(r.from, r.to))).toEqual([
        key(S.PREPARED, S.MANUAL_REVIEW),
        key(S.SENT, S.UNKNOWN),
        key(S.SENT, S.FAILED),
        key(S.RECONCILING, S.FAILED),
        key(S.ACKNOWLEDGED, S.MANUAL_REVIEW),
        key(S.RECONCILING, S.MANUAL_REVIEW),
        key(S.UNKNOWN, S.MANUAL_REVIEW),
      ]);
    });

    it.each(required.map((r) => [r.from, r.to] as const))('%s -> %s without a reason: REASON_REQUIRED', (from, to) => {
      const base = ALLOWED.find((c) => c.from === from && c.to === to)!.context;
      expectRefused(from, to, { ...base, terminalReason: null }, C.REASON_REQUIRED);
      expectRefused(from, to, { ...base, terminalReason: undefined }, C.REASON_REQUIRED);
    });

    it('names the acceptable reasons in the refusal message', () => {
      const error = refusal(() => assertOperationTransition(S.SENT, S.FAILED, SENT_CONTEXT));
      expect(error.message).toContain('CONNECTOR_REJECTED');
      expect(error.message).toContain('SOURCE_UNREACHABLE');
    });

    it.each<[OperationStatus, OperationStatus, OperationTransitionContext]>([
      // I4: an uncertain outcome can never be recorded as FAILED.
      [S.SENT, S.FAILED, { ...SENT_CONTEXT, terminalReason: R.CONNECTOR_ERROR }],
      [S.SENT, S.UNKNOWN, { ...SENT_CONTEXT, terminalReason: R.CONNECTOR_REJECTED }],
      [S.ACKNOWLEDGED, S.MANUAL_REVIEW, { ...SENT_CONTEXT, terminalReason: R.CONNECTOR_ERROR }],
      [S.PREPARED, S.SENT, { ...UNSENT_CONTEXT, terminalReason: R.KNOWLEDGE_CONFLICT }],
      [S.RECONCILING, S.FAILED, { ...SENT_CONTEXT, terminalReason: R.CONNECTOR_REJECTED }],
    ])('refuses on %s -> %s a reason that does not explain the move: REASON_NOT_ALLOWED', (from, to, context) => {
      expectRefused(from, to, context, C.REASON_NOT_ALLOWED);
    });

    it('accepts no reason at all on moves whose reason list is empty', () => {
      for (const r of OPERATION_TRANSITIONS.filter((rule) => rule.reasons.length === 0)) {
        const base = ALLOWED.find((c) => c.from === r.from && c.to === r.to)!.context;
        for (const reason of TERMINAL_REASONS) {
          expectRefused(r.from, r.to, { ...base, terminalReason: reason }, C.REASON_NOT_ALLOWED);
        }
      }
    });

    it('accepts DENIED, and only DENIED, on a cancel of a never-sent operation', () => {
      const denied = { ...UNSENT_CONTEXT, terminalReason: R.DENIED };
      expect(() => assertOperationTransition(S.PREPARED, S.CANCELLED, denied)).not.toThrow();
      expect(() =>
        assertOperationTransition(S.MANUAL_REVIEW, S.CANCELLED, { ...denied, actor: 'human' }),
      ).not.toThrow();
      expectRefused(
        S.PREPARED,
        S.CANCELLED,
        { ...UNSENT_CONTEXT, terminalReason: R.CONNECTOR_REJECTED },
        C.REASON_NOT_ALLOWED,
      );
      expectRefused(S.SENT, S.FAILED, { ...SENT_CONTEXT, terminalReason: R.DENIED }, C.REASON_NOT_ALLOWED);
    });

    it('accepts an optional reason on ACKNOWLEDGED -> UNKNOWN', () => {
      expect(() => assertOperationTransition(S.ACKNOWLEDGED, S.UNKNOWN, SENT_CONTEXT)).not.toThrow();
      expect(() =>
        assertOperationTransition(S.ACKNOWLEDGED, S.UNKNOWN, { ...SENT_CONTEXT, terminalReason: R.CONNECTOR_ERROR }),
      ).not.toThrow();
    });
  });

  describe('human-only resolutions of MANUAL_REVIEW', () => {
    const humanMoves = ALLOWED.filter((c) => c.from === S.MANUAL_REVIEW);

    it.each(humanMoves)('$from -> $to refuses the system and an unnamed actor: HUMAN_ONLY', ({ from, to, context }) => {
      expectRefused(from, to, { ...context, actor: 'system' }, C.HUMAN_ONLY);
      expectRefused(from, to, { ...context, actor: undefined }, C.HUMAN_ONLY);
    });

    it.each([S.SENT, S.CANCELLED])('MANUAL_REVIEW -> %s of an operation already sent: ALREADY_SENT', (to) => {
      for (const verificationMethod of [RAW, ''] as const) {
        expectRefused(S.MANUAL_REVIEW, to, { actor: 'human', verificationMethod, everSent: true }, C.ALREADY_SENT);
      }
    });

    it('a human may resolve to VERIFIED without read-after-write (the resolution carries the evidence)', () => {
      expect(() =>
        assertOperationTransition(S.MANUAL_REVIEW, S.VERIFIED, {
          actor: 'human',
          verificationMethod: '',
          everSent: true,
        }),
      ).not.toThrow();
    });
  });

  describe('a held, never-sent operation of an execution that ended (cancelled, expired, failed)', () => {
    const ended = { actor: 'system', verificationMethod: RAW, everSent: false, executionEnded: true } as const;

    it('MANUAL_REVIEW -> CANCELLED by the system, whatever the hold', () => {
      for (const heldFor of TERMINAL_REASONS) {
        expect(() => assertOperationTransition(S.MANUAL_REVIEW, S.CANCELLED, { ...ended, heldFor })).not.toThrow();
      }
    });

    it('not while the execution has not ended so: HUMAN_ONLY', () => {
      expectRefused(S.MANUAL_REVIEW, S.CANCELLED, { ...ended, executionEnded: false }, C.HUMAN_ONLY);
      expectRefused(S.MANUAL_REVIEW, S.CANCELLED, { ...ended, executionEnded: undefined }, C.HUMAN_ONLY);
    });

    it('never for an operation that was ever sent (its effect may exist): ALREADY_SENT', () => {
      expectRefused(S.MANUAL_REVIEW, S.CANCELLED, { ...ended, everSent: true }, C.ALREADY_SENT);
    });

    it('no other decision of a hold: the end leaves only cancelling', () => {
      expectRefused(S.MANUAL_REVIEW, S.SENT, ended, C.HUMAN_ONLY);
      expectRefused(S.MANUAL_REVIEW, S.FAILED, { ...ended, everSent: true }, C.HUMAN_ONLY);
      expectRefused(S.MANUAL_REVIEW, S.VERIFIED, { ...ended, everSent: true }, C.HUMAN_ONLY);
    });

    it('heldNeverSent: exactly the MANUAL_REVIEW operations with no attempt', () => {
      for (const status of OPERATION_STATUSES) {
        expect(heldNeverSent({ status, attempt: 0 })).toBe(status === S.MANUAL_REVIEW);
        expect(heldNeverSent({ status, attempt: 1 })).toBe(false);
      }
    });
  });

  describe('system re-check of a hold the source could not conclude', () => {
    const recheck = { ...SENT_CONTEXT, actor: 'system' } as const;

    it.each([R.SOURCE_UNREACHABLE, R.STALE_REPLICA])(
      'MANUAL_REVIEW -> VERIFIED by the system while held for %s, with read-after-write',
      (heldFor) => {
        expect(() => assertOperationTransition(S.MANUAL_REVIEW, S.VERIFIED, { ...recheck, heldFor })).not.toThrow();
      },
    );

    it.each([
      ['without read-after-write evidence', { verificationMethod: '' }, C.VERIFICATION_UNAVAILABLE],
      ['never for an operation that was not sent', { everSent: false }, C.NEVER_SENT],
    ] as const)('%s: %s', (_situation, unlike, code) => {
      expectRefused(S.MANUAL_REVIEW, S.VERIFIED, { ...recheck, ...unlike, heldFor: R.SOURCE_UNREACHABLE }, code);
    });

    it.each([R.INTEGRITY_MISMATCH, R.FIELD_MISSING, R.CONNECTOR_ERROR, R.KNOWLEDGE_CONFLICT])(
      'held for %s (a judgement, not a lagging read): HUMAN_ONLY',
      (heldFor) => {
        expectRefused(S.MANUAL_REVIEW, S.VERIFIED, { ...recheck, heldFor }, C.HUMAN_ONLY);
      },
    );

    it('never FAILED, whatever the hold: absence after a hold is for a human to judge', () => {
      for (const heldFor of TERMINAL_REASONS) {
        expectRefused(S.MANUAL_REVIEW, S.FAILED, { ...recheck, heldFor }, C.HUMAN_ONLY);
      }
    });
  });

  describe('the verification rule (I6)', () => {
    const sentUnread = { verificationMethod: '', everSent: true } as const;
    /** Never sent, the source already showing the requested state, and nothing that can read it back. */
    const unsentUnreadNoChange = { verificationMethod: '', everSent: false, noChangeRequired: true } as const;

    it.each([S.ACKNOWLEDGED, S.RECONCILING])(
      '%s -> VERIFIED without read_after_write: VERIFICATION_UNAVAILABLE',
      (from) => {
        for (const context of [sentUnread, { ...sentUnread, actor: 'system' as const }]) {
          expectRefused(from, S.VERIFIED, context, C.VERIFICATION_UNAVAILABLE);
        }
      },
    );

    it('PREPARED -> VERIFIED without read_after_write: VERIFICATION_UNAVAILABLE', () => {
      expectRefused(S.PREPARED, S.VERIFIED, unsentUnreadNoChange, C.VERIFICATION_UNAVAILABLE);
    });

    it('PREPARED -> VERIFIED only when no change is required', () => {
      for (const context of [UNSENT_CONTEXT, { ...UNSENT_CONTEXT, noChangeRequired: false }]) {
        expectRefused(S.PREPARED, S.VERIFIED, context, C.ILLEGAL_TRANSITION);
      }
    });

    it.each([S.ACKNOWLEDGED, S.RECONCILING])(
      '%s -> VERIFIED without read_after_write is refused even when the actor says human',
      (from) => {
        // A human resolution is MANUAL_REVIEW -> VERIFIED; anything else bypassing read-back would break I6.
        expectRefused(from, S.VERIFIED, { ...sentUnread, actor: 'human' }, C.VERIFICATION_UNAVAILABLE);
      },
    );

    it('PREPARED -> VERIFIED needs read_after_write and no change required even when the actor says human', () => {
      expectRefused(S.PREPARED, S.VERIFIED, { ...unsentUnreadNoChange, actor: 'human' }, C.VERIFICATION_UNAVAILABLE);
      expectRefused(S.PREPARED, S.VERIFIED, { ...UNSENT_CONTEXT, actor: 'human' }, C.ILLEGAL_TRANSITION);
    });
  });

  describe('errors', () => {
    it('are IllegalTransitionError instances that describe the refused move', () => {
      const error = refusal(() => assertOperationTransition(S.UNKNOWN, S.SENT, PERMISSIVE));
      expect(error).toBeInstanceOf(Error);
      expect(error).toBeInstanceOf(IllegalTransitionError);
      expect(error.name).toBe('IllegalTransitionError');
      expect(error.code).toBe(C.ILLEGAL_TRANSITION);
      expect(error.message).toBe('operation UNKNOWN -> SENT refused: not in the transition table');
    });

    it('isOperationTransitionAllowed does not swallow errors that are not refusals', () => {
      expect(() =>
        isOperationTransitionAllowed(S.PREPARED, S.SENT, null as unknown as OperationTransitionContext),
      ).toThrow(TypeError);
    });
  });
});

describe('operationTransitionRule and allowedOperationTargets', () => {
  it('returns the rule for a design move and undefined otherwise', () => {
    expect(operationTransitionRule(S.SENT, S.UNKNOWN)).toMatchObject({
      from: S.SENT,
      to: S.UNKNOWN,
      reasons: [R.CONNECTOR_ERROR],
      reasonRequired: true,
      humanOnly: false,
      neverSentOnly: false,
      extension: false,
    });
    expect(operationTransitionRule(S.UNKNOWN, S.SENT)).toBeUndefined();
  });

  it.each(OPERATION_STATUSES)('lists the design targets of %s', (from) => {
    const expected = CONTRACT_TRANSITIONS.filter(([f]) => f === from).map(([, to]) => to);
    expect([...allowedOperationTargets(from)].sort()).toEqual([...expected].sort());
  });

  it('gives terminal statuses no targets', () => {
    expect(allowedOperationTargets(S.VERIFIED)).toEqual([]);
    expect(allowedOperationTargets(S.FAILED)).toEqual([]);
    expect(allowedOperationTargets(S.CANCELLED)).toEqual([]);
  });
});

describe('operation statuses, terminality and retry rules', () => {
  const CONTRACT_STATUS_TABLE: ReadonlyArray<[OperationStatus, boolean, RetryRule]> = [
    [S.PREPARED, false, RetryRule.NONE],
    [S.SENT, false, RetryRule.WAIT],
    [S.ACKNOWLEDGED, false, RetryRule.WAIT],
    [S.VERIFIED, true, RetryRule.NOT_NEEDED],
    [S.UNKNOWN, false, RetryRule.FORBIDDEN],
    [S.RECONCILING, false, RetryRule.WAIT],
    [S.FAILED, true, RetryRule.SAFE],
    [S.MANUAL_REVIEW, false, RetryRule.CONSOLE],
    [S.CANCELLED, true, RetryRule.SAFE],
  ];

  it('has exactly the nine statuses of the design, in its order', () => {
    expect(OPERATION_STATUSES).toEqual(CONTRACT_STATUS_TABLE.map(([s]) => s));
    expect(Object.keys(OPERATION_STATUS_INFO).sort()).toEqual([...OPERATION_STATUSES].sort());
  });

  it('uses the wire names of the retry rules', () => {
    expect(Object.values(RetryRule).sort()).toEqual(['console', 'forbidden', 'none', 'not_needed', 'safe', 'wait']);
  });

  it('has exactly the terminal reasons of the design', () => {
    expect([...TERMINAL_REASONS].sort()).toEqual(
      [
        'CONNECTOR_ERROR',
        'CONNECTOR_REJECTED',
        'KNOWLEDGE_CONFLICT',
        'STALE_REPLICA',
        'FIELD_MISSING',
        'SOURCE_UNREACHABLE',
        'INTEGRITY_MISMATCH',
        'DENIED',
        'PROVEN_ABSENT',
      ].sort(),
    );
  });

  describe.each(CONTRACT_STATUS_TABLE)('%s', (status, terminal, retry) => {
    it(`is ${terminal ? '' : 'not '}terminal`, () => {
      expect(isTerminalOperation(status)).toBe(terminal);
      expect(OPERATION_STATUS_INFO[status].terminal).toBe(terminal);
    });

    it(`has retry rule ${retry}`, () => {
      expect(retryRuleOf(status)).toBe(retry);
      expect(OPERATION_STATUS_INFO[status].meaning.length).toBeGreaterThan(0);
    });

    it(`${retry === RetryRule.SAFE ? 'may' : 'may not'} be retried`, () => {
      expect(canRetry(status)).toBe(retry === RetryRule.SAFE);
    });

    it('has no way out exactly when terminal', () => {
      expect(allowedOperationTargets(status).length === 0).toBe(terminal);
    });
  });

  it('allows a retry only from FAILED and CANCELLED (I5)', () => {
    expect(OPERATION_STATUSES.filter(canRetry)).toEqual([S.FAILED, S.CANCELLED]);
  });

  /** The retry rule shown for an operation in `status` whose failure is not refuted since, given the other `facts`. */
  const unrefutedRule = (
    status: OperationStatus,
    facts: Omit<Parameters<typeof operationRetryRule>[0], 'status' | 'failureRefuted'> = {},
  ) => operationRetryRule({ status, failureRefuted: false, ...facts });

  it('shows a FAILED refuted since as forbidden, and every other operation by its status (operationRetryRule)', () => {
    expect(operationRetryRule({ status: S.FAILED, failureRefuted: true })).toBe(RetryRule.FORBIDDEN);
    expect(unrefutedRule(S.FAILED)).toBe(RetryRule.SAFE);
    expect(operationRetryRule({ status: S.CANCELLED, failureRefuted: true })).toBe(RetryRule.SAFE);
  });

  it('shows a retry made on the word of a FAILED refuted since as forbidden, where its status would allow a retry', () => {
    for (const status of [S.CANCELLED, S.FAILED]) {
      expect(unrefutedRule(status, { retryRefuted: true })).toBe(RetryRule.FORBIDDEN);
      expect(unrefutedRule(status, { retryRefuted: false })).toBe(RetryRule.SAFE);
    }
    expect(unrefutedRule(S.MANUAL_REVIEW, { retryRefuted: true })).toBe(RetryRule.CONSOLE);
  });

  it('refuses a retry once its chain of retries holds DENIAL_LIMIT denials, and shows it forbidden', () => {
    expect(DENIAL_LIMIT).toBe(3);
    expect([0, 1, 2, 3, 4].map((denials) => denialLimitReached(denials))).toEqual([false, false, false, true, true]);
    // A chain longer than the walk that counts its denials is not known to be under the limit: padding it with retries
    // cancelled unsent must not push its denials out of the count.
    expect([0, 1, 2].map((denials) => denialLimitReached(denials, true))).toEqual([true, true, true]);
    expect(denialLimitReached(2, false)).toBe(false);
    expect(unrefutedRule(S.CANCELLED, { denialLimitReached: true })).toBe(RetryRule.FORBIDDEN);
    expect(unrefutedRule(S.CANCELLED, { denialLimitReached: false })).toBe(RetryRule.SAFE);
    // Only where a retry would otherwise be allowed: a held operation is still the console's.
    expect(unrefutedRule(S.MANUAL_REVIEW, { denialLimitReached: true })).toBe(RetryRule.CONSOLE);
  });

  it('shows a VERIFIED the provider’s late rejection contradicts as forbidden, not not_needed', () => {
    expect(unrefutedRule(S.VERIFIED, { verificationContradicted: true })).toBe(RetryRule.FORBIDDEN);
    expect(unrefutedRule(S.VERIFIED, { verificationContradicted: false })).toBe(RetryRule.NOT_NEEDED);
    expect(unrefutedRule(S.MANUAL_REVIEW, { verificationContradicted: true })).toBe(RetryRule.CONSOLE);
  });

  it('forbids a retry of UNKNOWN, SENT, ACKNOWLEDGED and RECONCILING (I5)', () => {
    for (const status of [S.UNKNOWN, S.SENT, S.ACKNOWLEDGED, S.RECONCILING]) expect(canRetry(status)).toBe(false);
    expect(retryRuleOf(S.UNKNOWN)).toBe(RetryRule.FORBIDDEN);
  });
});

describe('isFinalOperation and isSettledOperation', () => {
  // A held operation (MANUAL_REVIEW) is settled (nothing runs until a human acts) but not final (a human still will).
  const table: ReadonlyArray<[OperationStatus, boolean, boolean, boolean, boolean]> = [
    // status, final with read_after_write, final without, settled with read_after_write, settled without
    [S.PREPARED, false, false, false, false],
    [S.SENT, false, false, false, false],
    [S.ACKNOWLEDGED, false, true, false, true],
    [S.VERIFIED, true, true, true, true],
    [S.UNKNOWN, false, false, false, false],
    [S.RECONCILING, false, false, false, false],
    [S.FAILED, true, true, true, true],
    [S.MANUAL_REVIEW, false, false, true, true],
    [S.CANCELLED, true, true, true, true],
  ];

  it('covers every status', () => {
    expect(table.map(([s]) => s)).toEqual(OPERATION_STATUSES);
  });

  it.each(table)(
    '%s: final with read_after_write %s, without %s; settled with %s, without %s',
    (status, finalWithReadBack, finalWithout, settledWithReadBack, settledWithout) => {
      expect(isFinalOperation(status, RAW)).toBe(finalWithReadBack);
      expect(isFinalOperation(status, '')).toBe(finalWithout);
      expect(isSettledOperation(status, RAW)).toBe(settledWithReadBack);
      expect(isSettledOperation(status, '')).toBe(settledWithout);
    },
  );
});

describe('keepsTerminalReason', () => {
  it('keeps the reason only between UNKNOWN and RECONCILING, where the outcome it explains is still uncertain', () => {
    expect(OPERATION_STATUSES.filter(keepsTerminalReason)).toEqual([S.UNKNOWN, S.RECONCILING]);
    // Never a status a move may end a hold in: the hold's reason is left behind with the hold.
    for (const rule of OPERATION_TRANSITIONS.filter((r) => r.from === S.MANUAL_REVIEW)) {
      expect(keepsTerminalReason(rule.to)).toBe(false);
    }
  });
});

describe('permittedResolutions (recovery obligation)', () => {
  it('offers SENT or CANCELLED for an operation held before it was ever sent', () => {
    expect(permittedResolutions(S.MANUAL_REVIEW, false)).toEqual([S.SENT, S.CANCELLED]);
  });

  it('offers VERIFIED or FAILED for an operation that was sent', () => {
    expect(permittedResolutions(S.MANUAL_REVIEW, true)).toEqual([S.VERIFIED, S.FAILED]);
  });

  it.each(OPERATION_STATUSES.filter((s) => s !== S.MANUAL_REVIEW))('offers nothing for %s', (status) => {
    expect(permittedResolutions(status, false)).toEqual([]);
    expect(permittedResolutions(status, true)).toEqual([]);
  });

  it('only offers moves the gate accepts for a human', () => {
    for (const everSent of [false, true]) {
      for (const to of permittedResolutions(S.MANUAL_REVIEW, everSent)) {
        expect(
          isOperationTransitionAllowed(S.MANUAL_REVIEW, to, { actor: 'human', verificationMethod: '', everSent }),
        ).toBe(true);
      }
    }
  });
});

describe('human resolution of an operation that was never sent', () => {
  it('refuses VERIFIED and FAILED for a never-sent operation (nothing to judge)', () => {
    for (const to of [OperationStatus.VERIFIED, OperationStatus.FAILED]) {
      expect(() =>
        assertOperationTransition(OperationStatus.MANUAL_REVIEW, to, {
          actor: 'human',
          verificationMethod: '',
          everSent: false,
        }),
      ).toThrow(expect.objectContaining({ code: C.NEVER_SENT }));
    }
  });
});

describe('no relabelling of what the source showed (I14)', () => {
  const held = { ...SENT_CONTEXT, actor: 'human' as const };

  it.each(HOLDS_WITH_A_RECORD_ON_FILE)(
    'refuses a human FAILED for an operation held for %s: the source showed a record of the effect',
    (heldFor) => {
      expect(() => assertOperationTransition(S.MANUAL_REVIEW, S.FAILED, { ...held, heldFor })).toThrow(
        expect.objectContaining({ code: C.EFFECT_EXISTS }),
      );
      expect(isOperationTransitionAllowed(S.MANUAL_REVIEW, S.VERIFIED, { ...held, heldFor })).toBe(true);
    },
  );

  it.each(TERMINAL_REASONS.filter((r) => !HOLDS_WITH_A_RECORD_ON_FILE.includes(r)))(
    'still permits a human FAILED when held for %s, unless the provider acknowledged the send',
    (reason) => {
      expect(isOperationTransitionAllowed(S.MANUAL_REVIEW, S.FAILED, { ...held, heldFor: reason })).toBe(true);
      expect(() =>
        assertOperationTransition(S.MANUAL_REVIEW, S.FAILED, { ...held, heldFor: reason, acknowledged: true }),
      ).toThrow(expect.objectContaining({ code: C.EFFECT_EXISTS, message: expect.stringContaining('acknowledged') }));
      expect(
        isOperationTransitionAllowed(S.MANUAL_REVIEW, S.VERIFIED, { ...held, heldFor: reason, acknowledged: true }),
      ).toBe(true);
    },
  );

  it('permitted resolutions follow the hold reason', () => {
    expect(permittedResolutions(S.MANUAL_REVIEW, true, TerminalReason.INTEGRITY_MISMATCH)).toEqual([S.VERIFIED]);
    expect(permittedResolutions(S.MANUAL_REVIEW, true, TerminalReason.SOURCE_UNREACHABLE)).toEqual([
      S.VERIFIED,
      S.FAILED,
    ]);
  });
});

describe('resolutionOptions: every action with its reason, exactly what the gate permits', () => {
  /** The options a reviewer is offered for an operation in MANUAL_REVIEW. */
  const inReview = (everSent: boolean, heldFor: TerminalReason | null, canReadBack = true) =>
    resolutionOptions({ status: S.MANUAL_REVIEW, everSent, heldFor, canReadBack });
  /** The options of a never-sent operation held for a knowledge conflict, with what its release also needs. */
  const neverSentInReview = (release: ReleaseNeeds) =>
    resolutionOptions({
      status: S.MANUAL_REVIEW,
      everSent: false,
      heldFor: TerminalReason.KNOWLEDGE_CONFLICT,
      canReadBack: true,
      release,
    });

  it('offers exactly the permitted options: no FAILED before the bound, none with a record on file, none once not held', () => {
    const now = new Date('2026-12-03T10:00:00Z');
    const offered = (input: Partial<Parameters<typeof resolutionOptions>[0]>) =>
      offeredResolutions(
        resolutionOptions({
          status: S.MANUAL_REVIEW,
          everSent: true,
          heldFor: null,
          canReadBack: false,
          now,
          ...input,
        }),
      );
    expect(offered({ absenceEvidentAt: new Date(now.getTime() + 1000) })).toEqual([S.VERIFIED]);
    expect(offered({ absenceEvidentAt: now })).toEqual([S.VERIFIED, S.FAILED]);
    expect(offered({ absenceEvidentAt: now, acknowledged: true })).toEqual([S.VERIFIED]);
    expect(offered({ absenceEvidentAt: now, effectShown: true })).toEqual([S.VERIFIED]);
    expect(offered({ status: S.FAILED })).toEqual([]);
  });

  it('releases a never-sent operation only while its execution may still send and its dependencies are done', () => {
    const release = (executionStatus: ExecutionStatus, dependencies: DependenciesState) =>
      neverSentInReview({ executionStatus, deadlinePassed: false, dependencies })
        .filter((o) => o.permitted)
        .map((o) => o.status);
    for (const status of [ExecutionStatus.RUNNING, ExecutionStatus.WAITING_FOR_APPROVAL, ExecutionStatus.COMPLETED]) {
      expect(release(status, 'done')).toEqual([S.SENT, S.CANCELLED]);
      expect(release(status, 'waiting')).toEqual([S.CANCELLED]);
      expect(release(status, 'broken')).toEqual([S.CANCELLED]);
    }
    for (const status of [ExecutionStatus.CANCELLED, ExecutionStatus.EXPIRED, ExecutionStatus.FAILED]) {
      expect(release(status, 'done')).toEqual([S.CANCELLED]);
    }
    // What a sent operation is offered does not depend on it.
    expect(
      resolutionOptions({
        status: S.MANUAL_REVIEW,
        everSent: true,
        heldFor: TerminalReason.SOURCE_UNREACHABLE,
        canReadBack: false,
        release: { executionStatus: ExecutionStatus.CANCELLED, deadlinePassed: true, dependencies: 'broken' },
      })
        .filter((o) => o.permitted)
        .map((o) => o.status),
    ).toEqual([S.VERIFIED, S.FAILED]);
  });

  it('does not offer the release of a retry whose retried FAILED was contradicted since: it would be withdrawn', () => {
    const options = (retryRefuted?: boolean) =>
      neverSentInReview({
        executionStatus: ExecutionStatus.RUNNING,
        deadlinePassed: false,
        dependencies: 'done',
        retryRefuted,
      });
    expect(options(true).find((o) => o.status === S.SENT)).toEqual({
      status: S.SENT,
      permitted: false,
      why: expect.stringContaining('it retries a FAILED that was contradicted since'),
      check: null,
      available_at: null,
    });
    expect(offeredResolutions(options(true))).toEqual([S.CANCELLED]);
    for (const refuted of [false, undefined])
      expect(offeredResolutions(options(refuted))).toEqual([S.SENT, S.CANCELLED]);
  });

  it('says when a release also grants the approval the operation needs', () => {
    const sentOption = (grantsApproval?: boolean) =>
      neverSentInReview({
        executionStatus: ExecutionStatus.RUNNING,
        deadlinePassed: false,
        dependencies: 'done',
        grantsApproval,
      }).find((o) => o.status === S.SENT);
    expect(sentOption(true)).toMatchObject({
      permitted: true,
      why: expect.stringContaining('releasing it grants that approval too'),
    });
    for (const grants of [false, undefined]) {
      expect(sentOption(grants)).toMatchObject({
        permitted: true,
        why: 'it was never sent: release it to be sent now, once',
      });
    }
  });

  it('does not release past the execution’s deadline before the sweeper expired it; a completed one is not bound by it', () => {
    const options = (executionStatus: ExecutionStatus) =>
      neverSentInReview({ executionStatus, deadlinePassed: true, dependencies: 'done' });
    for (const status of [ExecutionStatus.RUNNING, ExecutionStatus.WAITING_FOR_APPROVAL]) {
      expect(options(status).find((o) => o.status === S.SENT)).toEqual({
        status: S.SENT,
        permitted: false,
        why: 'its execution’s deadline has passed: nothing more is sent for it; cancel it instead',
        check: null,
        available_at: null,
      });
      expect(
        options(status)
          .filter((o) => o.permitted)
          .map((o) => o.status),
      ).toEqual([S.CANCELLED]);
    }
    expect(
      options(ExecutionStatus.COMPLETED)
        .filter((o) => o.permitted)
        .map((o) => o.status),
    ).toEqual([S.SENT, S.CANCELLED]);
  });

  it('tells a FAILED refused because the source showed the effect from one refused because nothing was sent', () => {
    const refusedFailed = (everSent: boolean, heldFor: TerminalReason) =>
      resolutionRefusedBy({ status: S.MANUAL_REVIEW, everSent, heldFor }, S.FAILED)?.code ?? null;
    expect(refusedFailed(true, TerminalReason.INTEGRITY_MISMATCH)).toBe(StatusModelErrorCode.EFFECT_EXISTS);
    for (const heldFor of [TerminalReason.KNOWLEDGE_CONFLICT, TerminalReason.SOURCE_UNREACHABLE]) {
      expect(refusedFailed(false, heldFor)).toBe(StatusModelErrorCode.NEVER_SENT);
    }
    expect(refusedFailed(true, TerminalReason.SOURCE_UNREACHABLE)).toBeNull();
  });

  it('answers only refusals: an error that is not one (a bug, not a verdict) propagates', () => {
    const broken = {
      get status(): OperationStatus {
        throw new TypeError('unreadable row');
      },
      everSent: true,
      heldFor: null,
    };
    expect(() => resolutionRefusedBy(broken, S.FAILED)).toThrow(TypeError);
  });

  it('reads the source before a VERIFIED only where the provider’s own lookup can answer that the effect does not exist', () => {
    const verified = (
      canReadBack: boolean,
      source: { sourceProvesAbsence?: boolean; acknowledged?: boolean },
      heldFor = TerminalReason.SOURCE_UNREACHABLE,
    ) =>
      resolutionOptions({ status: S.MANUAL_REVIEW, everSent: true, heldFor, canReadBack, ...source }).find(
        (o) => o.status === S.VERIFIED,
      )!;
    const providersLookup = { sourceProvesAbsence: true, acknowledged: false };
    expect(verified(true, providersLookup)).toMatchObject({ permitted: true, check: 'read_back' });
    expect(verified(true, providersLookup).why).toContain('reads the source first');
    for (const [canReadBack, source, heldFor] of [
      [true, { sourceProvesAbsence: false, acknowledged: false }, TerminalReason.SOURCE_UNREACHABLE],
      [true, { sourceProvesAbsence: true, acknowledged: true }, TerminalReason.STALE_REPLICA],
      [true, {}, TerminalReason.SOURCE_UNREACHABLE],
      [false, providersLookup, TerminalReason.SOURCE_UNREACHABLE],
      // A record the hold's own read found is on file: a later "not there" does not refute it.
      [true, providersLookup, TerminalReason.INTEGRITY_MISMATCH],
      [true, providersLookup, TerminalReason.FIELD_MISSING],
    ] as const) {
      expect(verified(canReadBack, source, heldFor)).toEqual({
        status: S.VERIFIED,
        permitted: true,
        why: 'the effect happened, shown by the evidence you give',
        check: null,
        available_at: null,
      });
    }
  });

  it('refuses FAILED where a record of the effect is on file: the provider acknowledged it, or the hold’s read found it', () => {
    const failed = (heldFor: TerminalReason, acknowledged: boolean) =>
      resolutionOptions({ status: S.MANUAL_REVIEW, everSent: true, heldFor, canReadBack: true, acknowledged }).find(
        (o) => o.status === S.FAILED,
      )!;
    for (const heldFor of [TerminalReason.STALE_REPLICA, TerminalReason.SOURCE_UNREACHABLE]) {
      expect(failed(heldFor, true)).toMatchObject({ permitted: false, check: null });
      expect(failed(heldFor, false)).toMatchObject({ permitted: true, check: 'read_back' });
      expect(permittedResolutions(S.MANUAL_REVIEW, true, heldFor, true)).toEqual([S.VERIFIED]);
      expect(
        resolutionRefusedBy({ status: S.MANUAL_REVIEW, everSent: true, heldFor, acknowledged: true }, S.FAILED)?.code,
      ).toBe(StatusModelErrorCode.EFFECT_EXISTS);
    }
    for (const heldFor of [TerminalReason.INTEGRITY_MISMATCH, TerminalReason.FIELD_MISSING]) {
      for (const acknowledged of [true, false]) {
        expect(failed(heldFor, acknowledged)).toMatchObject({ permitted: false, check: null });
        expect(permittedResolutions(S.MANUAL_REVIEW, true, heldFor, acknowledged)).toEqual([S.VERIFIED]);
      }
    }
    // Nothing of it refuses a never-sent hold's choices, nor a VERIFIED.
    expect(permittedResolutions(S.MANUAL_REVIEW, false, TerminalReason.KNOWLEDGE_CONFLICT, false)).toEqual([
      S.SENT,
      S.CANCELLED,
    ]);
  });

  /**
   * A person's `target` for a sent hold, refused with `refusal` while `fact` is on file: the resolution check answers
   * the code, and the move itself throws it.
   */
  function expectPersonsResolutionRefused(
    heldFor: TerminalReason,
    fact: { effectShown: true } | { rejected: true },
    target: ResolutionStatus,
    refusal: { code: StatusModelErrorCode; message?: unknown },
  ) {
    expect(resolutionRefusedBy({ status: S.MANUAL_REVIEW, everSent: true, heldFor, ...fact }, target)?.code).toBe(
      refusal.code,
    );
    expect(() =>
      assertOperationTransition(S.MANUAL_REVIEW, target, {
        actor: 'human',
        verificationMethod: '',
        everSent: true,
        heldFor,
        ...fact,
      }),
    ).toThrow(expect.objectContaining(refusal));
  }

  it('refuses FAILED, and only FAILED, once a re-check’s read showed the effect while held, whatever the hold', () => {
    for (const heldFor of [
      TerminalReason.CONNECTOR_ERROR,
      TerminalReason.SOURCE_UNREACHABLE,
      TerminalReason.STALE_REPLICA,
    ]) {
      const options = resolutionOptions({
        status: S.MANUAL_REVIEW,
        everSent: true,
        heldFor,
        canReadBack: true,
        effectShown: true,
      });
      expect(options.find((o) => o.status === S.FAILED)).toMatchObject({
        permitted: false,
        why: expect.stringContaining('a read of the source showed it'),
      });
      expect(options.find((o) => o.status === S.VERIFIED)).toMatchObject({ permitted: true });
      expect(permittedResolutions(S.MANUAL_REVIEW, true, heldFor, false, true)).toEqual([S.VERIFIED]);
      expectPersonsResolutionRefused(heldFor, { effectShown: true }, S.FAILED, {
        code: C.EFFECT_EXISTS,
        message: expect.stringContaining('showed the effect'),
      });
    }
  });

  it('refuses a person’s VERIFIED, and only VERIFIED, once the provider’s rejection of the send is on file', () => {
    for (const heldFor of [
      TerminalReason.CONNECTOR_ERROR,
      TerminalReason.SOURCE_UNREACHABLE,
      TerminalReason.STALE_REPLICA,
    ]) {
      for (const canReadBack of [true, false]) {
        const options = resolutionOptions({
          status: S.MANUAL_REVIEW,
          everSent: true,
          heldFor,
          canReadBack,
          rejected: true,
        });
        expect(options.find((o) => o.status === S.VERIFIED)).toMatchObject({
          permitted: false,
          check: null,
          why: expect.stringContaining('the provider rejected this send'),
        });
        expect(options.find((o) => o.status === S.FAILED)).toMatchObject({ permitted: true });
      }
      expect(permittedResolutions(S.MANUAL_REVIEW, true, heldFor, false, false, true)).toEqual([S.FAILED]);
      expect(permittedResolutions(S.MANUAL_REVIEW, true, heldFor, false, false, false)).toEqual([S.VERIFIED, S.FAILED]);
      expectPersonsResolutionRefused(heldFor, { rejected: true }, S.VERIFIED, { code: C.PROVIDER_REJECTED });
    }
    // A read of the source that finds the effect is not a person's word: a re-check may still release the hold.
    expect(
      assertOperationTransition(S.MANUAL_REVIEW, S.VERIFIED, {
        actor: 'system',
        verificationMethod: VerificationMethod.READ_AFTER_WRITE,
        everSent: true,
        heldFor: TerminalReason.SOURCE_UNREACHABLE,
        rejected: true,
      }),
    ).toMatchObject({ to: S.VERIFIED });
    // Acknowledged and rejected both (a provider that answered two ways): neither "it happened" nor "it did not".
    expect(permittedResolutions(S.MANUAL_REVIEW, true, TerminalReason.CONNECTOR_ERROR, true, false, true)).toEqual([]);
  });

  it('offers nothing outside MANUAL_REVIEW', () => {
    expect(resolutionOptions({ status: S.UNKNOWN, everSent: true, heldFor: null, canReadBack: true })).toEqual([]);
  });

  it('for a sent operation whose source can be read: FAILED is checked against a read of the source', () => {
    const options = inReview(true, TerminalReason.SOURCE_UNREACHABLE);
    expect(options.map((o) => [o.status, o.permitted, o.check])).toEqual([
      [S.VERIFIED, true, null],
      [S.FAILED, true, 'read_back'],
      [S.SENT, false, null],
      [S.CANCELLED, false, null],
    ]);
    expect(options.find((o) => o.status === S.SENT)!.why).toMatch(/already sent/);
  });

  it('without read-back, FAILED rests on the evidence given', () => {
    const failed = inReview(true, TerminalReason.CONNECTOR_ERROR, false).find((o) => o.status === S.FAILED)!;
    expect(failed).toMatchObject({ permitted: true, check: null, why: expect.stringMatching(/evidence you give/) });
  });

  it('INTEGRITY_MISMATCH: FAILED is refused with the reason a reviewer reads', () => {
    const failed = inReview(true, TerminalReason.INTEGRITY_MISMATCH).find((o) => o.status === S.FAILED)!;
    expect(failed).toMatchObject({ permitted: false, why: expect.stringMatching(/record of this effect is on file/) });
  });

  it('a never-sent operation: release or cancel; judging an outcome is refused', () => {
    const options = inReview(false, TerminalReason.KNOWLEDGE_CONFLICT);
    expect(options.filter((o) => o.permitted).map((o) => o.status)).toEqual([S.SENT, S.CANCELLED]);
    expect(options.find((o) => o.status === S.VERIFIED)!.why).toMatch(/never sent/);
  });

  it('agrees with permittedResolutions for every reason and sent state', () => {
    for (const everSent of [false, true]) {
      for (const heldFor of [null, ...TERMINAL_REASONS]) {
        const permitted = inReview(everSent, heldFor)
          .filter((o) => o.permitted)
          .map((o) => o.status);
        expect(permitted).toEqual(permittedResolutions(S.MANUAL_REVIEW, everSent, heldFor));
      }
    }
  });
});

describe('the final statuses as lists (for SQL)', () => {
  it('are the statuses isFinalOperation accepts: any verification, and only without a read-back', () => {
    expect(FINAL_OPERATION_STATUSES).toEqual([
      OperationStatus.VERIFIED,
      OperationStatus.FAILED,
      OperationStatus.CANCELLED,
    ]);
    expect(FINAL_WITHOUT_READ_BACK_STATUSES).toEqual([OperationStatus.ACKNOWLEDGED]);
    for (const status of OPERATION_STATUSES) {
      expect(isFinalOperation(status, VerificationMethod.READ_AFTER_WRITE)).toBe(
        FINAL_OPERATION_STATUSES.includes(status),
      );
      expect(isFinalOperation(status, '')).toBe(
        FINAL_OPERATION_STATUSES.includes(status) || FINAL_WITHOUT_READ_BACK_STATUSES.includes(status),
      );
    }
  });
});
