import {
  CANCEL_CAUSE_OF_ENDED_EXECUTION,
  DependencyView,
  LATE_ACKNOWLEDGEMENT_STATUSES,
  LATE_ACKNOWLEDGEMENT_TRIES,
  LATE_REJECTION_TRIES,
  PreparedStep,
  RELEASABLE_EXECUTION_STATUSES,
  SENDABLE_EXECUTION_STATUSES,
  cancelCauseOfEndedExecution,
  checkAfterSend,
  mayStillCall,
  answerWriteRetry,
  sendStart,
  dependencyBroken,
  dependenciesState,
  dependencySatisfied,
  nextPreconditionRead,
  preparedStep,
  startedExecutionTarget,
  completesWhenVerified,
  latestByKey,
  sendsWithPreparation,
} from './dispatch';
import { EXECUTION_STATUSES, ExecutionStatus } from './execution';
import { FAILURE_CODES, operationFailure } from './failure';
import { OPERATION_TRANSITIONS, OperationStatus, TerminalReason, VerificationMethod } from './operation';

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

  it('not a VERIFIED the provider’s late rejection of its send contradicted since', () => {
    const at = '2026-01-01T00:00:00.000Z';
    expect(dependencySatisfied({ status: S.VERIFIED, verificationMethod: '', rejectedAt: at })).toBe(false);
    expect(dependencySatisfied({ status: S.VERIFIED, verificationMethod: '', rejectedAt: null })).toBe(true);
  });
});

describe('SENDABLE_EXECUTION_STATUSES', () => {
  it('is only running: a dispatch found waiting, planning or terminal is stray', () => {
    expect(SENDABLE_EXECUTION_STATUSES).toEqual([ExecutionStatus.RUNNING]);
  });
});

describe('the ends after which nothing more is sent (a held, never-sent operation is cancelled with them)', () => {
  it('are exactly the statuses a release may not be carried out in: cancelled, expired, failed', () => {
    const E = ExecutionStatus;
    expect(RELEASABLE_EXECUTION_STATUSES).toEqual(
      EXECUTION_STATUSES.filter((s) => ![E.CANCELLED, E.EXPIRED, E.FAILED].includes(s)),
    );
    for (const status of EXECUTION_STATUSES) {
      expect({ status, cause: cancelCauseOfEndedExecution(status) }).toEqual({
        status,
        cause: RELEASABLE_EXECUTION_STATUSES.includes(status)
          ? null
          : CANCEL_CAUSE_OF_ENDED_EXECUTION[status as keyof typeof CANCEL_CAUSE_OF_ENDED_EXECUTION],
      });
    }
    expect(cancelCauseOfEndedExecution(E.FAILED)).toBe('execution_invalid');
  });

  it('each cause is a never-sent CANCELLED failure code, and the failure of a hold the system ended names it', () => {
    for (const cause of Object.values(CANCEL_CAUSE_OF_ENDED_EXECUTION)) {
      expect(FAILURE_CODES[cause]).toMatchObject({ applies_to: 'operation', status: S.CANCELLED, phase: 'dispatch' });
      const failure = operationFailure(
        { status: S.CANCELLED, terminalReason: TerminalReason.KNOWLEDGE_CONFLICT },
        { from: S.MANUAL_REVIEW, cause, actor: 'system', at: new Date(0) },
      );
      expect(failure?.code).toBe(cause);
    }
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

  it('a VERIFIED the provider’s late rejection contradicted since is broken: nothing will establish it again', () => {
    expect(dependencyBroken({ status: S.VERIFIED, rejectedAt: new Date(0) })).toBe(true);
    expect(dependencyBroken({ status: S.VERIFIED, rejectedAt: null })).toBe(false);
  });
});

describe('dependenciesState: where a held operation’s dependencies stand, for a release', () => {
  const RAW = VerificationMethod.READ_AFTER_WRITE;
  it.each([
    ['no dependencies', [], 'done'],
    ['every one VERIFIED', [{ status: S.VERIFIED, verificationMethod: RAW }], 'done'],
    [
      'one still SENT',
      [
        { status: S.VERIFIED, verificationMethod: RAW },
        { status: S.SENT, verificationMethod: RAW },
      ],
      'waiting',
    ],
    [
      'one FAILED, another waiting',
      [
        { status: S.FAILED, verificationMethod: RAW },
        { status: S.SENT, verificationMethod: RAW },
      ],
      'broken',
    ],
    ['one that does not exist', [undefined], 'broken'],
  ] as const)('%s: %s', (_, dependencies, expected) => {
    expect(dependenciesState(dependencies as readonly (DependencyView | undefined)[])).toBe(expected);
  });
});

describe('preparedStep: a table of PREPARED operations and what the lifecycle does next', () => {
  const RAW = VerificationMethod.READ_AFTER_WRITE;
  const NONE = '' as const;
  const dep = (
    status: OperationStatus,
    verificationMethod: DependencyView['verificationMethod'] = RAW,
  ): DependencyView => ({
    key: 'charge',
    status,
    verificationMethod,
  });
  const base = { dependencies: [], approvalRequired: false, approvalState: undefined, preconditionOwed: false };
  const table: [string, Parameters<typeof preparedStep>[0], PreparedStep][] = [
    ['no dependencies, nothing owed', base, { kind: 'ready' }],
    ['its dependency is VERIFIED', { ...base, dependencies: [dep(OperationStatus.VERIFIED)] }, { kind: 'ready' }],
    [
      'its dependency is ACKNOWLEDGED and cannot be read back',
      { ...base, dependencies: [dep(OperationStatus.ACKNOWLEDGED, NONE)] },
      { kind: 'ready' },
    ],
    [
      'its dependency is ACKNOWLEDGED, awaiting its read-back',
      { ...base, dependencies: [dep(OperationStatus.ACKNOWLEDGED)] },
      { kind: 'wait' },
    ],
    ['its dependency is UNKNOWN', { ...base, dependencies: [dep(OperationStatus.UNKNOWN)] }, { kind: 'wait' }],
    [
      'its dependency FAILED',
      { ...base, dependencies: [dep(OperationStatus.VERIFIED), dep(OperationStatus.FAILED)] },
      { kind: 'cancel', dependency: dep(OperationStatus.FAILED) },
    ],
    [
      'its dependency does not exist',
      { ...base, dependencies: [dep(OperationStatus.VERIFIED), undefined] },
      { kind: 'cancel', dependency: undefined },
    ],
    [
      'a broken dependency wins over a denied approval',
      { ...base, dependencies: [dep(OperationStatus.CANCELLED)], approvalRequired: true, approvalState: 'denied' },
      { kind: 'cancel', dependency: dep(OperationStatus.CANCELLED) },
    ],
    [
      'an approval needed and never asked for',
      { ...base, approvalRequired: true },
      { kind: 'await-approval', request: true },
    ],
    [
      'an approval asked for, not decided',
      { ...base, approvalRequired: true, approvalState: 'requested' },
      { kind: 'await-approval', request: false },
    ],
    ['an approval denied', { ...base, approvalRequired: true, approvalState: 'denied' }, { kind: 'deny' }],
    ['an approval granted', { ...base, approvalRequired: true, approvalState: 'granted' }, { kind: 'ready' }],
    [
      'an approval granted, its precondition owed a read',
      { ...base, approvalRequired: true, approvalState: 'granted', preconditionOwed: true },
      { kind: 'read-precondition' },
    ],
    [
      'no approval needed any more (the rule removed): a recorded denial still stands',
      { ...base, approvalState: 'denied' },
      { kind: 'deny' },
    ],
    [
      'no approval needed any more (the rule removed): a request asked for is still owed its decision',
      { ...base, approvalState: 'requested' },
      { kind: 'await-approval', request: false },
    ],
    ['no approval needed, one granted early', { ...base, approvalState: 'granted' }, { kind: 'ready' }],
    [
      'a retry whose chain was contradicted: cancelled before its approval is asked for',
      { ...base, approvalRequired: true, retryRefuted: true },
      { kind: 'refuted' },
    ],
    [
      'a retry whose chain was contradicted: cancelled though its approval was asked for, or granted',
      { ...base, approvalRequired: true, approvalState: 'granted', retryRefuted: true },
      { kind: 'refuted' },
    ],
    [
      'a retry whose chain was contradicted: cancelled while its dependencies still wait',
      { ...base, dependencies: [dep(OperationStatus.SENT)], retryRefuted: true },
      { kind: 'refuted' },
    ],
    [
      'a retry whose chain stands: asked for its approval as any operation',
      { ...base, approvalRequired: true, retryRefuted: false },
      { kind: 'await-approval', request: true },
    ],
    [
      'waiting dependencies come before an owed read',
      { ...base, dependencies: [dep(OperationStatus.SENT)], preconditionOwed: true },
      { kind: 'wait' },
    ],
  ];
  it.each(table)('%s', (_name, given, expected) => {
    expect(preparedStep(given)).toEqual(expected);
  });
});

describe('startedExecutionTarget', () => {
  const op = (
    status: OperationStatus,
    verificationMethod: VerificationMethod | '' = VerificationMethod.READ_AFTER_WRITE,
  ) => ({
    status,
    verificationMethod,
  });
  it.each([
    ['every operation settled', [op(OperationStatus.VERIFIED), op(OperationStatus.FAILED)], 0, 0, 'complete'],
    [
      'dispatches handed out',
      [op(OperationStatus.PREPARED), op(OperationStatus.VERIFIED)],
      1,
      0,
      ExecutionStatus.RUNNING,
    ],
    [
      'only approvals hold it',
      [op(OperationStatus.PREPARED), op(OperationStatus.VERIFIED)],
      0,
      1,
      ExecutionStatus.WAITING_FOR_APPROVAL,
    ],
    [
      'approvals and an effect in flight',
      [op(OperationStatus.PREPARED), op(OperationStatus.UNKNOWN)],
      0,
      1,
      ExecutionStatus.WAITING_FOR_TOOL,
    ],
    ['an effect awaiting its read-back', [op(OperationStatus.ACKNOWLEDGED)], 0, 0, ExecutionStatus.WAITING_FOR_TOOL],
    ['an ACKNOWLEDGED that cannot be read back is settled', [op(OperationStatus.ACKNOWLEDGED, '')], 0, 0, 'complete'],
    ['a held operation is settled (the hold awaits a person)', [op(OperationStatus.MANUAL_REVIEW)], 0, 0, 'complete'],
  ] as const)('%s → %s', (_name, operations, dispatched, awaitingApproval, expected) => {
    expect(startedExecutionTarget({ operations: [...operations], dispatched, awaitingApproval })).toBe(expected);
  });
});

describe('completesWhenVerified: the completion written with the last VERIFIED', () => {
  const R = VerificationMethod.READ_AFTER_WRITE;
  const op = (status: OperationStatus, verificationMethod: VerificationMethod | '' = R) => ({
    status,
    verificationMethod,
  });
  it.each([
    ['the only operation', 0, [], true],
    ['every other one final (VERIFIED, FAILED, CANCELLED)', 0, [op(S.VERIFIED), op(S.FAILED), op(S.CANCELLED)], true],
    ['another ACKNOWLEDGED that cannot be read back (its honest end)', 0, [op(S.ACKNOWLEDGED, '')], true],
    ['criteria to judge (from evidence the sender does not hold)', 1, [], false],
    ['another still PREPARED', 0, [op(S.PREPARED)], false],
    ['another awaiting its read-back', 0, [op(S.ACKNOWLEDGED)], false],
    ['another in flight (SENT, UNKNOWN, RECONCILING)', 0, [op(S.SENT), op(S.UNKNOWN), op(S.RECONCILING)], false],
    ['another held for a person (settled, not final: it may still move)', 0, [op(S.MANUAL_REVIEW)], false],
  ] as const)('%s → %p', (_name, criteria, others, expected) => {
    expect(completesWhenVerified({ criteria, operation: { verificationMethod: R }, others: [...others] })).toBe(
      expected,
    );
  });
});

describe('sendsWithPreparation: a quiet preparation’s moves written with its one send', () => {
  const ready = {
    status: OperationStatus.PREPARED,
    dependsOn: [] as string[],
    approvalRequired: false,
    approvalState: undefined,
    preconditionOwed: false,
    capped: false,
  };
  it.each([
    ['one operation, ready at once', [ready], true],
    ['two operations (their sends go side by side, once the execution runs)', [ready, ready], false],
    ['no operation', [], false],
    ['an operation that depends on another', [{ ...ready, dependsOn: ['first'] }], false],
    ['an approval required', [{ ...ready, approvalRequired: true }], false],
    ['an approval recorded early (granted)', [{ ...ready, approvalState: 'granted' as const }], false],
    ['an approval recorded early (denied)', [{ ...ready, approvalState: 'denied' as const }], false],
    ['a precondition read owed', [{ ...ready, preconditionOwed: true }], false],
    ['under a spending cap', [{ ...ready, capped: true }], false],
    ['not PREPARED', [{ ...ready, status: OperationStatus.CANCELLED }], false],
  ])('%s → %s', (_, operations, expected) => {
    expect(sendsWithPreparation(operations)).toBe(expected);
  });
});

describe('sendStart: what a dispatch job found', () => {
  it.each([
    ['PREPARED', OperationStatus.PREPARED, 0, null, 'dispatch'],
    ['already SENT (a crash, a duplicate job): never called again', OperationStatus.SENT, 1, null, 'orphan'],
    ['held, never sent, released by a reviewer', OperationStatus.MANUAL_REVIEW, 0, OperationStatus.SENT, 'release'],
    ['held, never sent, no release', OperationStatus.MANUAL_REVIEW, 0, null, 'moved'],
    ['held after a send: a release never re-sends it', OperationStatus.MANUAL_REVIEW, 1, OperationStatus.SENT, 'moved'],
    ['held, never sent, resolved otherwise', OperationStatus.MANUAL_REVIEW, 0, OperationStatus.CANCELLED, 'moved'],
    ['cancelled meanwhile', OperationStatus.CANCELLED, 0, null, 'moved'],
    ['already acknowledged', OperationStatus.ACKNOWLEDGED, 1, null, 'moved'],
  ] as const)('%s', (_name, status, attempt, resolutionStatus, kind) => {
    expect(sendStart({ status, attempt, resolutionStatus, sender: 'dispatch-job' })).toEqual({ kind });
  });

  it('an advance job sending in-process leaves an operation already SENT to its sender, and never calls again', () => {
    const sent = { status: OperationStatus.SENT, attempt: 1, resolutionStatus: null };
    expect(sendStart({ ...sent, sender: 'advance-job' })).toEqual({ kind: 'sending-elsewhere' });
    expect(sendStart({ ...sent, sender: 'dispatch-job' })).toEqual({ kind: 'orphan' });
    const prepared = { status: OperationStatus.PREPARED, attempt: 0, resolutionStatus: null };
    expect(sendStart({ ...prepared, sender: 'advance-job' })).toEqual({ kind: 'dispatch' });
  });
});

describe('mayStillCall: after SENT, may the connector still be called?', () => {
  it.each([
    ['within the grace, the lock not asked', 200, null, true],
    ['at the end of the grace', 500, null, true],
    ['past the grace, the lock still held', 5_000, true, true],
    ['past the grace, the lock lost', 5_000, false, false],
    ['past the grace, the lock cannot be checked', 5_000, null, false],
  ] as const)('%s', (_name, sinceCommitStartMs, lockOwned, call) => {
    expect(mayStillCall({ sinceCommitStartMs, graceMs: 500, lockOwned }).call).toBe(call);
  });

  it('says why it does not call', () => {
    expect(mayStillCall({ sinceCommitStartMs: 5_000, graceMs: 500, lockOwned: false })).toEqual({
      call: false,
      why: '5000 ms since SENT and the dispatch job lock was lost',
    });
  });
});

describe('checkAfterSend', () => {
  it.each([
    [OperationStatus.ACKNOWLEDGED, VerificationMethod.READ_AFTER_WRITE, 'verify'],
    [OperationStatus.ACKNOWLEDGED, '', null],
    [OperationStatus.UNKNOWN, VerificationMethod.READ_AFTER_WRITE, 'reconcile'],
    [OperationStatus.UNKNOWN, '', 'reconcile'],
    [OperationStatus.FAILED, VerificationMethod.READ_AFTER_WRITE, null],
  ] as const)('%s (%p) → %p', (status, verificationMethod, check) => {
    expect(checkAfterSend({ status, verificationMethod })).toBe(check);
  });
});

describe('latestByKey: what a key names among operations read in position and generation order', () => {
  it('is the last of each key: its latest generation', () => {
    const ops = [
      { key: 'charge', generation: 0 },
      { key: 'notify', generation: 0 },
      { key: 'charge', generation: 1 },
    ];
    const latest = latestByKey(ops);
    expect([...latest.keys()]).toEqual(['charge', 'notify']);
    expect(latest.get('charge')).toBe(ops[2]);
    expect(latest.get('missing')).toBeUndefined();
  });
});

/**
 * The moves that go from a later try of `tries` back to an earlier one (two statuses tried one at a time are two
 * tries): an operation making one between two statements would be in none when each was tried.
 */
function backwardsBetween(tries: readonly (readonly OperationStatus[])[]): string[] {
  const tryOf = (status: OperationStatus) => tries.findIndex((t) => t.includes(status));
  return OPERATION_TRANSITIONS.filter((r) => {
    const from = tryOf(r.from);
    const to = tryOf(r.to);
    return from >= 0 && to >= 0 && to < from;
  }).map((r) => `${r.from}>${r.to}`);
}

describe('LATE_ACKNOWLEDGEMENT_TRIES: the compare-and-sets that record a late 2xx cannot all miss the operation', () => {
  it('covers the statuses a late 2xx is recorded in, in order', () => {
    expect(LATE_ACKNOWLEDGEMENT_TRIES.flat()).toEqual(LATE_ACKNOWLEDGEMENT_STATUSES);
  });

  it('no move goes from a later try back to an earlier one, or between two statuses tried one at a time', () => {
    const tryOf = (status: OperationStatus) => LATE_ACKNOWLEDGEMENT_TRIES.findIndex((t) => t.includes(status));
    expect(backwardsBetween(LATE_ACKNOWLEDGEMENT_TRIES)).toEqual([]);
    // RECONCILING goes back to UNKNOWN: tried one at a time, an operation that moved back between the two statements
    // was in neither when each was tried. Both are one compare-and-set.
    expect(
      OPERATION_TRANSITIONS.some((r) => r.from === OperationStatus.RECONCILING && r.to === OperationStatus.UNKNOWN),
    ).toBe(true);
    expect(tryOf(OperationStatus.RECONCILING)).toBe(tryOf(OperationStatus.UNKNOWN));
  });
});

describe('LATE_REJECTION_TRIES: the compare-and-sets that record a late rejection cannot all miss the operation', () => {
  it('no move goes from a later try back to an earlier one, or between two statuses tried one at a time', () => {
    expect(backwardsBetween(LATE_REJECTION_TRIES)).toEqual([]);
    expect(LATE_REJECTION_TRIES.flat()).toEqual([
      OperationStatus.UNKNOWN,
      OperationStatus.RECONCILING,
      OperationStatus.MANUAL_REVIEW,
      OperationStatus.VERIFIED,
    ]);
  });
});

describe('answerWriteRetry: a provider answer Postgres could not take is written again, for a bounded time', () => {
  it.each([
    // tries, since the first failure, limit, stopping → again, wait
    [1, 0, 60_000, false, true, 250],
    [2, 250, 60_000, false, true, 500],
    [6, 8_000, 60_000, false, true, 5_000],
    [20, 50_000, 60_000, false, true, 5_000],
    [20, 56_000, 60_000, false, false, undefined],
    [1, 0, 0, false, false, undefined],
    [1, 0, 60_000, true, false, undefined],
  ])(
    'after %i tries, %i ms in, limit %i, stopping %s: again %s (wait %s)',
    (tries, since, limitMs, stopping, again, wait) => {
      const decision = answerWriteRetry({ tries, sinceFirstFailureMs: since, limitMs, stopping });
      expect(decision.again).toBe(again);
      if (decision.again) expect(decision.waitMs).toBe(wait);
    },
  );
});
