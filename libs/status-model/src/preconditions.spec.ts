import { ExecutionStatus as E } from './execution';
import { VerificationMethod, VerificationMethodValue } from './operation';
import {
  ContextRead,
  ContextVerdict,
  baselineStaleness,
  grantAtDispatch,
  judgeContext,
  mustReadPrecondition,
  preparePhases,
  PreparingOperation,
  preparesWithoutWrites,
} from './preconditions';

describe('preparePhases: what preparing an execution still involves, from wherever it stands', () => {
  it.each([
    [E.CREATED, true, true, [E.VALIDATING, E.RESOLVING_CONTEXT, E.PLANNING, E.RUNNING]],
    [E.VALIDATING, true, true, [E.RESOLVING_CONTEXT, E.PLANNING, E.RUNNING]],
    [E.RESOLVING_CONTEXT, false, true, [E.PLANNING, E.RUNNING]],
    [E.PLANNING, false, false, [E.RUNNING]],
  ])('from %s: validate %s, read contexts %s, moves %j', (from, validate, readContexts, moves) => {
    expect(preparePhases(from)).toEqual({ validate, readContexts, moves });
  });

  it.each([E.RUNNING, E.WAITING_FOR_TOOL, E.COMPLETED, E.FAILED])('refuses %s, which is past preparation', (from) => {
    expect(() => preparePhases(from)).toThrow('not a preparing execution status');
  });
});

describe('mustReadPrecondition (I15)', () => {
  it.each([
    [true, { balance: 10 }, true],
    [true, {}, false],
    [true, null, false],
    [false, { balance: 10 }, false],
  ])('irreversible %s, expected_state %j → %s', (irreversible, expectedState, must) => {
    expect(mustReadPrecondition({ irreversible, expectedState })).toBe(must);
  });
});

describe('judgeContext: a context read → what happens to the PREPARED operation', () => {
  const RAW = VerificationMethod.READ_AFTER_WRITE;
  const NONE: VerificationMethodValue = '';
  const state = (s: Record<string, unknown>, extra: Partial<Extract<ContextRead, { kind: 'state' }>> = {}) =>
    ({ kind: 'state', state: s, requestedStatePresent: false, conflicts: [], ...extra }) as ContextRead;
  const cases: [string, Parameters<typeof judgeContext>[0], ContextRead, ContextVerdict][] = [
    [
      'unreadable, irreversible with an expected_state: never sent blind',
      { irreversible: true, expectedState: { status: 'open' }, verificationMethod: RAW },
      { kind: 'unreachable' },
      { kind: 'read-again' },
    ],
    [
      'unreadable, nothing requires the read: proceeds',
      { irreversible: true, expectedState: null, verificationMethod: RAW },
      { kind: 'unreachable' },
      { kind: 'proceed-unread' },
    ],
    [
      'unreadable, reversible with an expected_state: proceeds',
      { irreversible: false, expectedState: { status: 'open' }, verificationMethod: RAW },
      { kind: 'unreachable' },
      { kind: 'proceed-unread' },
    ],
    [
      'requested state already there and readable back: no change required',
      { irreversible: true, expectedState: null, verificationMethod: RAW },
      state({}, { requestedStatePresent: true }),
      { kind: 'no-change-required', expectationsMissed: [] },
    ],
    [
      'requested state already there, the agent expected it not to be: no change required, the miss recorded',
      { irreversible: true, expectedState: { charged: false }, verificationMethod: RAW },
      state({ charged: true }, { requestedStatePresent: true }),
      { kind: 'no-change-required', expectationsMissed: ['charged: expected false, source has true'] },
    ],
    [
      'requested state there but nothing can read it back: not claimed, it agrees',
      { irreversible: true, expectedState: null, verificationMethod: NONE },
      state({}, { requestedStatePresent: true }),
      { kind: 'agrees' },
    ],
    [
      'the expected_state holds: agrees',
      { irreversible: true, expectedState: { status: 'open', n: 1 }, verificationMethod: RAW },
      state({ status: 'open', n: 1, other: true }),
      { kind: 'agrees' },
    ],
    [
      'the expected_state differs, irreversible: held',
      { irreversible: true, expectedState: { status: 'open' }, verificationMethod: RAW },
      state({ status: 'closed' }),
      { kind: 'conflict', conflicts: ['status: expected "open", source has "closed"'], hold: true },
    ],
    [
      'a missing key counts as a difference',
      { irreversible: true, expectedState: { status: 'open' }, verificationMethod: RAW },
      state({}),
      { kind: 'conflict', conflicts: ['status: expected "open", source has undefined'], hold: true },
    ],
    [
      'a connector conflict and an expected_state difference, reversible: recorded, proceeds',
      { irreversible: false, expectedState: { n: 1 }, verificationMethod: RAW },
      state({ n: 2 }, { conflicts: ['currency differs'] }),
      { kind: 'conflict', conflicts: ['currency differs', 'n: expected 1, source has 2'], hold: false },
    ],
    [
      // The source's state has no such member: what every object inherits under the name is not the source's state.
      'an expected_state naming an inherited member (__proto__: {}), irreversible: the source has nothing there, held',
      { irreversible: true, expectedState: JSON.parse('{"__proto__":{}}'), verificationMethod: NONE },
      state({}),
      { kind: 'conflict', conflicts: ['__proto__: expected {}, source has undefined'], hold: true },
    ],
  ];
  it.each(cases)('%s', (_situation, op, read, verdict) => {
    expect(judgeContext(op, read)).toEqual(verdict);
  });
});

describe("preparesWithoutWrites: may preparation be the execution's moves alone, with no lock on the operations?", () => {
  const base: PreparingOperation = {
    prepared: true,
    irreversible: true,
    expectedState: { balance: 10 },
    verificationMethod: VerificationMethod.READ_AFTER_WRITE,
    approvalRequired: false,
    approvalRecorded: false,
  };
  const agrees: ContextRead = { kind: 'state', state: { balance: 10 }, requestedStatePresent: false, conflicts: [] };
  const cases: [string, PreparingOperation[], boolean][] = [
    ['no operations', [], true],
    ['a context that agrees', [{ ...base, context: agrees }], true],
    ['no context read (the connector has none, or the phase is past)', [base], true],
    [
      'an operation no longer PREPARED is not prepared here',
      [{ ...base, prepared: false, approvalRequired: true }],
      true,
    ],
    [
      'an unreachable source (read again, or recorded as a gap)',
      [{ ...base, context: { kind: 'unreachable' } }],
      false,
    ],
    ['a conflict with expected_state', [{ ...base, context: { ...agrees, state: { balance: 9 } } }], false],
    [
      'the requested state already there (VERIFIED, no change required)',
      [{ ...base, context: { ...agrees, requestedStatePresent: true } }],
      false,
    ],
    ['an approval to request', [{ ...base, context: agrees, approvalRequired: true }], false],
    ['an early decision whose baseline is recorded', [{ ...base, context: agrees, approvalRecorded: true }], false],
    [
      'one of two needs a write',
      [
        { ...base, context: agrees },
        { ...base, context: { kind: 'unreachable' } },
      ],
      false,
    ],
  ];
  it.each(cases)('%s → %s', (_, operations, expected) => {
    expect(preparesWithoutWrites(operations)).toBe(expected);
  });
});

describe('grantAtDispatch and baselineStaleness: does an approval still hold when the send comes?', () => {
  const now = new Date('2026-12-01T12:00:00Z');
  it.each([
    ['no approval', null, true, { kind: 'not-granted' }],
    ['requested, not granted', { state: 'requested' }, true, { kind: 'not-granted' }],
    ['denied', { state: 'denied' }, true, { kind: 'not-granted' }],
    [
      'granted, expired at this very moment',
      { state: 'granted', expires_at: '2026-12-01T12:00:00Z', baseline: { b: 1 } },
      true,
      { kind: 'stale', staleness: 'approval.stale_authority', cause: 'expired' },
    ],
    [
      'granted on a baseline the connector can read',
      { state: 'granted', expires_at: '2026-12-01T12:00:01Z', baseline: { b: 1 } },
      true,
      { kind: 'read-baseline' },
    ],
    ['granted on a baseline nothing can read', { state: 'granted', baseline: { b: 1 } }, false, { kind: 'valid' }],
    ['granted without a baseline', { state: 'granted' }, true, { kind: 'valid' }],
  ])('%s', (_situation, approval, readable, expected) => {
    expect(grantAtDispatch(approval, now, readable)).toEqual(expected);
  });

  it('a grant whose deciding key was revoked since is stale authority, however fresh; nothing else is', () => {
    const fresh = { state: 'granted', expires_at: '2026-12-01T12:10:00Z', baseline: { b: 1 } };
    expect(grantAtDispatch(fresh, now, true, false)).toEqual({
      kind: 'stale',
      staleness: 'approval.stale_authority',
      cause: 'key_revoked',
    });
    expect(grantAtDispatch(fresh, now, true, true)).toEqual({ kind: 'read-baseline' });
    expect(grantAtDispatch({ state: 'requested' }, now, true, false)).toEqual({ kind: 'not-granted' });
  });

  it('a source that changed since the grant makes it stale; the same source does not', () => {
    expect(baselineStaleness({ balance: 10, status: 'open' }, { balance: 10, status: 'open' })).toBeNull();
    expect(baselineStaleness({ balance: 10 }, { balance: 9 })).toBe('approval.stale_baseline');
    expect(baselineStaleness(undefined, {})).toBe('approval.stale_baseline');
  });

  it('the same source read with its members in another order is the same source (a baseline is stored as jsonb)', () => {
    // Postgres keeps a jsonb object's members shortest name first: the baseline of a charge found at the source comes
    // back as amount, charged, currency, charge_id, while the connector's fresh read says charged first. Compared as
    // text, every grant on it was withdrawn as stale and approval asked for again, the operation never sent.
    const stored = {
      amount: 5,
      charged: true,
      currency: 'EUR',
      charge_id: 'ch_1',
      nested: { b: [{ y: 1, x: 2 }], a: 1 },
    };
    const read = {
      charged: true,
      amount: 5,
      currency: 'EUR',
      charge_id: 'ch_1',
      nested: { a: 1, b: [{ x: 2, y: 1 }] },
    };
    expect(baselineStaleness(stored, read)).toBeNull();
    // Order inside a list is the source's own: a list in another order is another state.
    expect(baselineStaleness({ list: [1, 2] }, { list: [2, 1] })).toBe('approval.stale_baseline');
    expect(baselineStaleness({ a: 1 }, { a: 1, b: 2 })).toBe('approval.stale_baseline');
    expect(baselineStaleness({ a: null }, {})).toBe('approval.stale_baseline');
  });
});

describe("judgeContext: an expectation naming a marker's member name is compared like for like", () => {
  // A target's `verity:cut` member is kept as `verity:verity:cut` (a target cannot write Verity's markers).
  const kept = { 'data.v': { 'verity:verity:cut': 1, list: [{ 'verity:verity:clipped': 2 }] } };
  const expected = { 'data.v': { 'verity:cut': 1, list: [{ 'verity:clipped': 2 }] } };
  const op = { irreversible: true, expectedState: expected, verificationMethod: VerificationMethod.READ_AFTER_WRITE };

  it('agrees with the source that holds what the agent expected', () => {
    const read: ContextRead = { kind: 'state', state: kept, requestedStatePresent: false, conflicts: [] };
    expect(judgeContext(op, read)).toEqual({ kind: 'agrees' });
    expect(judgeContext(op, { ...read, requestedStatePresent: true })).toEqual({
      kind: 'no-change-required',
      expectationsMissed: [],
    });
  });

  it("is no match for Verity's own marker (a value cut or clipped is not what the agent wrote)", () => {
    const cut: ContextRead = {
      kind: 'state',
      state: { 'data.v': { 'verity:cut': 1, list: [{ 'verity:clipped': 2 }] } },
      requestedStatePresent: false,
      conflicts: [],
    };
    expect(judgeContext(op, cut)).toMatchObject({ kind: 'conflict', hold: true });
  });

  it('agrees with a source whose object holds what was expected in another member order (expected_state is jsonb)', () => {
    // Stored as jsonb, the agent's `{ "charged": true, "amount": 5 }` comes back shortest name first; the source's
    // read keeps its own order. Compared as text, an irreversible operation was held for a conflict that is none.
    const stored = {
      irreversible: true,
      expectedState: { v: { amount: 5, charged: true } },
      verificationMethod: VerificationMethod.READ_AFTER_WRITE,
    };
    const read: ContextRead = {
      kind: 'state',
      state: { v: { charged: true, amount: 5 } },
      requestedStatePresent: false,
      conflicts: [],
    };
    expect(judgeContext(stored, read)).toEqual({ kind: 'agrees' });
    const other: ContextRead = { ...read, state: { v: { charged: true, amount: 6 } } };
    expect(judgeContext(stored, other)).toMatchObject({ kind: 'conflict', hold: true });
  });
});
