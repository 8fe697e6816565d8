import { IllegalTransitionError, StatusModelErrorCode } from './errors';
import {
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
  isFinalOperation,
  isSettledOperation,
  isTerminalOperation,
  operationTransitionRule,
  retryRuleOf,
} from './operation';
import {
  OperationTransitionContext,
  assertOperationTransition,
  isOperationTransitionAllowed,
  permittedResolutions,
  resolutionOptions,
} from './validate';

const S = OperationStatus;
const R = TerminalReason;
const RAW = VerificationMethod.READ_AFTER_WRITE;

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
const key = (from: string, to: string) => `${from}>${to}`;
const CONTRACT_KEYS = new Set(CONTRACT_TRANSITIONS.map(([from, to]) => key(from, to)));

interface AllowedCase {
  from: OperationStatus;
  to: OperationStatus;
  context: OperationTransitionContext;
}

/** Every allowed move with a context that satisfies its conditions. */
const ALLOWED: AllowedCase[] = [
  { from: S.PREPARED, to: S.SENT, context: { verificationMethod: RAW, everSent: false } },
  {
    from: S.PREPARED,
    to: S.MANUAL_REVIEW,
    context: { verificationMethod: RAW, everSent: false, terminalReason: R.KNOWLEDGE_CONFLICT },
  },
  { from: S.PREPARED, to: S.CANCELLED, context: { verificationMethod: RAW, everSent: false } },
  { from: S.SENT, to: S.ACKNOWLEDGED, context: { verificationMethod: RAW, everSent: true } },
  {
    from: S.SENT,
    to: S.UNKNOWN,
    context: { verificationMethod: RAW, everSent: true, terminalReason: R.CONNECTOR_ERROR },
  },
  {
    from: S.SENT,
    to: S.FAILED,
    context: { verificationMethod: RAW, everSent: true, terminalReason: R.CONNECTOR_REJECTED },
  },
  { from: S.ACKNOWLEDGED, to: S.VERIFIED, context: { verificationMethod: RAW, everSent: true } },
  { from: S.ACKNOWLEDGED, to: S.UNKNOWN, context: { verificationMethod: RAW, everSent: true } },
  { from: S.UNKNOWN, to: S.RECONCILING, context: { verificationMethod: RAW, everSent: true } },
  { from: S.RECONCILING, to: S.VERIFIED, context: { verificationMethod: RAW, everSent: true } },
  {
    from: S.RECONCILING,
    to: S.FAILED,
    context: { verificationMethod: RAW, everSent: true, terminalReason: R.PROVEN_ABSENT },
  },
  {
    from: S.PREPARED,
    to: S.VERIFIED,
    context: { verificationMethod: RAW, everSent: false, noChangeRequired: true },
  },
  {
    from: S.ACKNOWLEDGED,
    to: S.MANUAL_REVIEW,
    context: { verificationMethod: RAW, everSent: true, terminalReason: R.INTEGRITY_MISMATCH },
  },
  { from: S.RECONCILING, to: S.UNKNOWN, context: { verificationMethod: RAW, everSent: true } },
  {
    from: S.RECONCILING,
    to: S.MANUAL_REVIEW,
    context: { verificationMethod: RAW, everSent: true, terminalReason: R.CONNECTOR_ERROR },
  },
  {
    from: S.UNKNOWN,
    to: S.MANUAL_REVIEW,
    context: { verificationMethod: RAW, everSent: true, terminalReason: R.CONNECTOR_ERROR },
  },
  { from: S.MANUAL_REVIEW, to: S.VERIFIED, context: { actor: 'human', verificationMethod: RAW, everSent: true } },
  { from: S.MANUAL_REVIEW, to: S.FAILED, context: { actor: 'human', verificationMethod: RAW, everSent: true } },
  { from: S.MANUAL_REVIEW, to: S.SENT, context: { actor: 'human', verificationMethod: RAW, everSent: false } },
  { from: S.MANUAL_REVIEW, to: S.CANCELLED, context: { actor: 'human', verificationMethod: RAW, everSent: false } },
];

/** A context that satisfies every condition a rule can impose, so only the table itself can refuse. */
const PERMISSIVE: OperationTransitionContext = {
  actor: 'human',
  terminalReason: null,
  verificationMethod: RAW,
  everSent: false,
  noChangeRequired: true,
};

function refusal(fn: () => unknown): IllegalTransitionError {
  try {
    fn();
  } catch (error) {
    if (error instanceof IllegalTransitionError) return error;
    throw error;
  }
  throw new Error('expected the status model to refuse the move');
}

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
      expectRefused(from, to, PERMISSIVE, StatusModelErrorCode.ILLEGAL_TRANSITION);
      expectRefused(
        from,
        to,
        { ...PERMISSIVE, actor: 'system', everSent: true },
        StatusModelErrorCode.ILLEGAL_TRANSITION,
      );
    });

    it('every one of the 61 pairs outside the table, even under the most permissive context', () => {
      let refused = 0;
      for (const from of OPERATION_STATUSES) {
        for (const to of OPERATION_STATUSES) {
          if (CONTRACT_KEYS.has(key(from, to))) continue;
          expectRefused(from, to, PERMISSIVE, StatusModelErrorCode.ILLEGAL_TRANSITION);
          refused += 1;
        }
      }
      expect(refused).toBe(81 - 20);
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
      expectRefused(from, to, { ...base, terminalReason: null }, StatusModelErrorCode.REASON_REQUIRED);
      expectRefused(from, to, { ...base, terminalReason: undefined }, StatusModelErrorCode.REASON_REQUIRED);
    });

    it('names the acceptable reasons in the refusal message', () => {
      const error = refusal(() =>
        assertOperationTransition(S.SENT, S.FAILED, { verificationMethod: RAW, everSent: true }),
      );
      expect(error.message).toContain('CONNECTOR_REJECTED');
      expect(error.message).toContain('SOURCE_UNREACHABLE');
    });

    it('refuses a reason that does not explain the move: REASON_NOT_ALLOWED', () => {
      const sent = { verificationMethod: RAW, everSent: true } as const;
      // I4: an uncertain outcome can never be recorded as FAILED.
      expectRefused(
        S.SENT,
        S.FAILED,
        { ...sent, terminalReason: R.CONNECTOR_ERROR },
        StatusModelErrorCode.REASON_NOT_ALLOWED,
      );
      expectRefused(
        S.SENT,
        S.UNKNOWN,
        { ...sent, terminalReason: R.CONNECTOR_REJECTED },
        StatusModelErrorCode.REASON_NOT_ALLOWED,
      );
      expectRefused(
        S.ACKNOWLEDGED,
        S.MANUAL_REVIEW,
        { ...sent, terminalReason: R.CONNECTOR_ERROR },
        StatusModelErrorCode.REASON_NOT_ALLOWED,
      );
      expectRefused(
        S.PREPARED,
        S.SENT,
        { verificationMethod: RAW, everSent: false, terminalReason: R.KNOWLEDGE_CONFLICT },
        StatusModelErrorCode.REASON_NOT_ALLOWED,
      );
      expectRefused(
        S.RECONCILING,
        S.FAILED,
        { ...sent, terminalReason: R.CONNECTOR_REJECTED },
        StatusModelErrorCode.REASON_NOT_ALLOWED,
      );
    });

    it('accepts no reason at all on moves whose reason list is empty', () => {
      for (const r of OPERATION_TRANSITIONS.filter((rule) => rule.reasons.length === 0)) {
        const base = ALLOWED.find((c) => c.from === r.from && c.to === r.to)!.context;
        for (const reason of TERMINAL_REASONS) {
          expectRefused(r.from, r.to, { ...base, terminalReason: reason }, StatusModelErrorCode.REASON_NOT_ALLOWED);
        }
      }
    });

    it('accepts DENIED, and only DENIED, on a cancel of a never-sent operation', () => {
      expect(() =>
        assertOperationTransition(S.PREPARED, S.CANCELLED, {
          verificationMethod: RAW,
          everSent: false,
          terminalReason: R.DENIED,
        }),
      ).not.toThrow();
      expect(() =>
        assertOperationTransition(S.MANUAL_REVIEW, S.CANCELLED, {
          actor: 'human',
          verificationMethod: RAW,
          everSent: false,
          terminalReason: R.DENIED,
        }),
      ).not.toThrow();
      expectRefused(
        S.PREPARED,
        S.CANCELLED,
        { verificationMethod: RAW, everSent: false, terminalReason: R.CONNECTOR_REJECTED },
        StatusModelErrorCode.REASON_NOT_ALLOWED,
      );
      expectRefused(
        S.SENT,
        S.FAILED,
        { verificationMethod: RAW, everSent: true, terminalReason: R.DENIED },
        StatusModelErrorCode.REASON_NOT_ALLOWED,
      );
    });

    it('accepts an optional reason on ACKNOWLEDGED -> UNKNOWN', () => {
      const context = { verificationMethod: RAW, everSent: true } as const;
      expect(() => assertOperationTransition(S.ACKNOWLEDGED, S.UNKNOWN, context)).not.toThrow();
      expect(() =>
        assertOperationTransition(S.ACKNOWLEDGED, S.UNKNOWN, { ...context, terminalReason: R.CONNECTOR_ERROR }),
      ).not.toThrow();
    });
  });

  describe('human-only resolutions of MANUAL_REVIEW', () => {
    const humanMoves = ALLOWED.filter((c) => c.from === S.MANUAL_REVIEW);

    it.each(humanMoves)('$from -> $to refuses the system and an unnamed actor: HUMAN_ONLY', ({ from, to, context }) => {
      expectRefused(from, to, { ...context, actor: 'system' }, StatusModelErrorCode.HUMAN_ONLY);
      expectRefused(from, to, { ...context, actor: undefined }, StatusModelErrorCode.HUMAN_ONLY);
    });

    it.each([S.SENT, S.CANCELLED])('MANUAL_REVIEW -> %s of an operation already sent: ALREADY_SENT', (to) => {
      expectRefused(
        S.MANUAL_REVIEW,
        to,
        { actor: 'human', verificationMethod: RAW, everSent: true },
        StatusModelErrorCode.ALREADY_SENT,
      );
      expectRefused(
        S.MANUAL_REVIEW,
        to,
        { actor: 'human', verificationMethod: '', everSent: true },
        StatusModelErrorCode.ALREADY_SENT,
      );
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

  describe('system re-check of a hold the source could not conclude', () => {
    const recheck = {
      actor: 'system',
      verificationMethod: VerificationMethod.READ_AFTER_WRITE,
      everSent: true,
    } as const;

    it.each([R.SOURCE_UNREACHABLE, R.STALE_REPLICA])(
      'MANUAL_REVIEW -> VERIFIED by the system while held for %s, with read-after-write',
      (heldFor) => {
        expect(() => assertOperationTransition(S.MANUAL_REVIEW, S.VERIFIED, { ...recheck, heldFor })).not.toThrow();
      },
    );

    it('without read-after-write evidence: VERIFICATION_UNAVAILABLE', () => {
      expectRefused(
        S.MANUAL_REVIEW,
        S.VERIFIED,
        { ...recheck, verificationMethod: '', heldFor: R.SOURCE_UNREACHABLE },
        StatusModelErrorCode.VERIFICATION_UNAVAILABLE,
      );
    });

    it.each([R.INTEGRITY_MISMATCH, R.FIELD_MISSING, R.CONNECTOR_ERROR, R.KNOWLEDGE_CONFLICT])(
      'held for %s (a judgement, not a lagging read): HUMAN_ONLY',
      (heldFor) => {
        expectRefused(S.MANUAL_REVIEW, S.VERIFIED, { ...recheck, heldFor }, StatusModelErrorCode.HUMAN_ONLY);
      },
    );

    it('never FAILED, whatever the hold: absence after a hold is for a human to judge', () => {
      for (const heldFor of TERMINAL_REASONS) {
        expectRefused(S.MANUAL_REVIEW, S.FAILED, { ...recheck, heldFor }, StatusModelErrorCode.HUMAN_ONLY);
      }
    });

    it('never for an operation that was not sent: NEVER_SENT', () => {
      expectRefused(
        S.MANUAL_REVIEW,
        S.VERIFIED,
        { ...recheck, everSent: false, heldFor: R.SOURCE_UNREACHABLE },
        StatusModelErrorCode.NEVER_SENT,
      );
    });
  });

  describe('the verification rule (I6)', () => {
    it.each([S.ACKNOWLEDGED, S.RECONCILING])(
      '%s -> VERIFIED without read_after_write: VERIFICATION_UNAVAILABLE',
      (from) => {
        expectRefused(
          from,
          S.VERIFIED,
          { verificationMethod: '', everSent: true },
          StatusModelErrorCode.VERIFICATION_UNAVAILABLE,
        );
        expectRefused(
          from,
          S.VERIFIED,
          { actor: 'system', verificationMethod: '', everSent: true },
          StatusModelErrorCode.VERIFICATION_UNAVAILABLE,
        );
      },
    );

    it('PREPARED -> VERIFIED without read_after_write: VERIFICATION_UNAVAILABLE', () => {
      expectRefused(
        S.PREPARED,
        S.VERIFIED,
        { verificationMethod: '', everSent: false, noChangeRequired: true },
        StatusModelErrorCode.VERIFICATION_UNAVAILABLE,
      );
    });

    it('PREPARED -> VERIFIED only when no change is required', () => {
      expectRefused(
        S.PREPARED,
        S.VERIFIED,
        { verificationMethod: RAW, everSent: false },
        StatusModelErrorCode.ILLEGAL_TRANSITION,
      );
      expectRefused(
        S.PREPARED,
        S.VERIFIED,
        { verificationMethod: RAW, everSent: false, noChangeRequired: false },
        StatusModelErrorCode.ILLEGAL_TRANSITION,
      );
    });

    it.each([S.ACKNOWLEDGED, S.RECONCILING])(
      '%s -> VERIFIED without read_after_write is refused even when the actor says human',
      (from) => {
        // A human resolution is MANUAL_REVIEW -> VERIFIED; anything else bypassing read-back would break I6.
        expectRefused(
          from,
          S.VERIFIED,
          { actor: 'human', verificationMethod: '', everSent: true },
          StatusModelErrorCode.VERIFICATION_UNAVAILABLE,
        );
      },
    );

    it('PREPARED -> VERIFIED needs read_after_write and no change required even when the actor says human', () => {
      expectRefused(
        S.PREPARED,
        S.VERIFIED,
        { actor: 'human', verificationMethod: '', everSent: false, noChangeRequired: true },
        StatusModelErrorCode.VERIFICATION_UNAVAILABLE,
      );
      expectRefused(
        S.PREPARED,
        S.VERIFIED,
        { actor: 'human', verificationMethod: RAW, everSent: false },
        StatusModelErrorCode.ILLEGAL_TRANSITION,
      );
    });
  });

  describe('errors', () => {
    it('are IllegalTransitionError instances that describe the refused move', () => {
      const error = refusal(() => assertOperationTransition(S.UNKNOWN, S.SENT, PERMISSIVE));
      expect(error).toBeInstanceOf(Error);
      expect(error).toBeInstanceOf(IllegalTransitionError);
      expect(error.name).toBe('IllegalTransitionError');
      expect(error.code).toBe(StatusModelErrorCode.ILLEGAL_TRANSITION);
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
      ).toThrow(expect.objectContaining({ code: StatusModelErrorCode.NEVER_SENT }));
    }
  });
});

describe('no relabelling of what the source showed (I14)', () => {
  const held = { actor: 'human' as const, verificationMethod: RAW, everSent: true };

  it('refuses a human FAILED for an operation held for INTEGRITY_MISMATCH: the source showed the effect', () => {
    expect(() =>
      assertOperationTransition(S.MANUAL_REVIEW, S.FAILED, { ...held, heldFor: TerminalReason.INTEGRITY_MISMATCH }),
    ).toThrow(expect.objectContaining({ code: StatusModelErrorCode.EFFECT_EXISTS }));
    expect(
      isOperationTransitionAllowed(S.MANUAL_REVIEW, S.VERIFIED, {
        ...held,
        heldFor: TerminalReason.INTEGRITY_MISMATCH,
      }),
    ).toBe(true);
  });

  it.each(TERMINAL_REASONS.filter((r) => r !== TerminalReason.INTEGRITY_MISMATCH))(
    'still permits a human FAILED when held for %s',
    (reason) => {
      expect(isOperationTransitionAllowed(S.MANUAL_REVIEW, S.FAILED, { ...held, heldFor: reason })).toBe(true);
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
  it('offers nothing outside MANUAL_REVIEW', () => {
    expect(resolutionOptions({ status: S.UNKNOWN, everSent: true, heldFor: null, canReadBack: true })).toEqual([]);
  });

  it('for a sent operation whose source can be read: FAILED is checked against a read of the source', () => {
    const options = resolutionOptions({
      status: S.MANUAL_REVIEW,
      everSent: true,
      heldFor: TerminalReason.SOURCE_UNREACHABLE,
      canReadBack: true,
    });
    expect(options.map((o) => [o.status, o.permitted, o.check])).toEqual([
      [S.VERIFIED, true, null],
      [S.FAILED, true, 'read_back'],
      [S.SENT, false, null],
      [S.CANCELLED, false, null],
    ]);
    expect(options.find((o) => o.status === S.SENT)!.why).toMatch(/already sent/);
  });

  it('without read-back, FAILED rests on the evidence given', () => {
    const failed = resolutionOptions({
      status: S.MANUAL_REVIEW,
      everSent: true,
      heldFor: TerminalReason.CONNECTOR_ERROR,
      canReadBack: false,
    }).find((o) => o.status === S.FAILED)!;
    expect(failed).toMatchObject({ permitted: true, check: null, why: expect.stringMatching(/evidence you give/) });
  });

  it('INTEGRITY_MISMATCH: FAILED is refused with the reason a reviewer reads', () => {
    const failed = resolutionOptions({
      status: S.MANUAL_REVIEW,
      everSent: true,
      heldFor: TerminalReason.INTEGRITY_MISMATCH,
      canReadBack: true,
    }).find((o) => o.status === S.FAILED)!;
    expect(failed).toMatchObject({ permitted: false, why: expect.stringMatching(/provider shows this effect/) });
  });

  it('a never-sent operation: release or cancel; judging an outcome is refused', () => {
    const options = resolutionOptions({
      status: S.MANUAL_REVIEW,
      everSent: false,
      heldFor: TerminalReason.KNOWLEDGE_CONFLICT,
      canReadBack: true,
    });
    expect(options.filter((o) => o.permitted).map((o) => o.status)).toEqual([S.SENT, S.CANCELLED]);
    expect(options.find((o) => o.status === S.VERIFIED)!.why).toMatch(/never sent/);
  });

  it('agrees with permittedResolutions for every reason and sent state', () => {
    for (const everSent of [false, true]) {
      for (const heldFor of [null, ...TERMINAL_REASONS]) {
        const permitted = resolutionOptions({ status: S.MANUAL_REVIEW, everSent, heldFor, canReadBack: true })
          .filter((o) => o.permitted)
          .map((o) => o.status);
        expect(permitted).toEqual(permittedResolutions(S.MANUAL_REVIEW, everSent, heldFor));
      }
    }
  });
});
