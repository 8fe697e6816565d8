import { ExecutionStatus } from './execution';
import {
  EGRESS_REFUSED,
  SECRET_NOT_BOUND,
  SECRET_NOT_SET,
  spendingCapRefusalCause,
  FAILURE_CATEGORIES,
  FAILURE_CODES,
  LastStatusChange,
  RETRY_REFUTED,
  cancelledAsRefutedRetry,
  refutedRetryCancel,
  executionFailure,
  operationFailure,
} from './failure';
import { OPERATION_STATUSES, OperationStatus, TerminalReason } from './operation';

const S = OperationStatus;
const R = TerminalReason;
const E = ExecutionStatus;
const AT = new Date('2030-01-02T03:04:05.000Z');
const change = (from: OperationStatus | null, extra: Partial<LastStatusChange> = {}): LastStatusChange => ({
  from,
  at: AT,
  ...extra,
});

describe('operationFailure (the failure object, derived from status, reason and the last move)', () => {
  it.each<[string, OperationStatus, TerminalReason | null, LastStatusChange, string, string, string, boolean]>([
    [
      'explicit rejection',
      S.FAILED,
      R.CONNECTOR_REJECTED,
      change(S.SENT),
      'connector_rejected',
      'dispatch',
      'provider_rejected',
      false,
    ],
    [
      'never delivered',
      S.FAILED,
      R.SOURCE_UNREACHABLE,
      change(S.SENT),
      'never_delivered',
      'dispatch',
      'transient',
      true,
    ],
    [
      'never sent: the tenant’s egress policy refused the target (not transient: it fails until the allowlist changes)',
      S.FAILED,
      R.SOURCE_UNREACHABLE,
      change(S.SENT, { cause: 'egress_refused', refusal: "host internal.example is not on this tenant's allowlist" }),
      'egress_refused',
      'dispatch',
      'policy',
      false,
    ],
    [
      'never sent: a secret the call names is not set (not transient: it fails until an admin sets it)',
      S.FAILED,
      R.SOURCE_UNREACHABLE,
      change(S.SENT, { cause: 'secret_not_set', refusal: 'secret "crm_token" is not set for this tenant' }),
      'secret_not_set',
      'dispatch',
      'policy',
      false,
    ],
    [
      'never sent: a secret the call names is not bound to its host (not transient: it fails until an admin binds it)',
      S.FAILED,
      R.SOURCE_UNREACHABLE,
      change(S.SENT, {
        cause: 'secret_not_bound',
        refusal: 'secret "crm_token" may not be sent to echo.example:443',
      }),
      'secret_not_bound',
      'dispatch',
      'policy',
      false,
    ],
    [
      'proven absent',
      S.FAILED,
      R.PROVEN_ABSENT,
      change(S.RECONCILING),
      'proven_absent',
      'reconciliation',
      'transient',
      true,
    ],
    [
      'proven absent (older row, no reason)',
      S.FAILED,
      null,
      change(S.RECONCILING),
      'proven_absent',
      'reconciliation',
      'transient',
      true,
    ],
    [
      'resolved FAILED by a reviewer',
      S.FAILED,
      null,
      change(S.MANUAL_REVIEW, { actor: 'human' }),
      'resolved_failed',
      'review',
      'human',
      false,
    ],
    [
      'denied',
      S.CANCELLED,
      R.DENIED,
      change(S.PREPARED, { cause: 'approval_denied' }),
      'approval_denied',
      'approval',
      'policy',
      false,
    ],
    [
      'denied (recorded before DENIED existed)',
      S.CANCELLED,
      null,
      change(S.PREPARED, { cause: 'approval_denied' }),
      'approval_denied',
      'approval',
      'policy',
      false,
    ],
    [
      'a reviewer’s release refused by a spending cap (the platform refused it, not the reviewer)',
      S.CANCELLED,
      R.KNOWLEDGE_CONFLICT,
      change(S.MANUAL_REVIEW, { actor: 'human', cause: 'spending_cap_exceeded' }),
      'spending_cap_reached',
      'dispatch',
      'policy',
      true,
    ],
    [
      'a reviewer’s release whose amount alone is above a spending cap: no window has room for it',
      S.CANCELLED,
      R.KNOWLEDGE_CONFLICT,
      change(S.MANUAL_REVIEW, { actor: 'human', cause: 'amount_above_cap' }),
      'amount_above_cap',
      'dispatch',
      'policy',
      false,
    ],
    [
      'dependency failed',
      S.CANCELLED,
      null,
      change(S.PREPARED, { cause: 'dependency_not_done' }),
      'dependency_not_done',
      'dispatch',
      'policy',
      false,
    ],
    [
      'spending cap',
      S.CANCELLED,
      null,
      change(S.PREPARED, { cause: 'spending_cap_exceeded' }),
      'spending_cap_reached',
      'dispatch',
      'policy',
      true,
    ],
    [
      'an amount above a spending cap’s own max_amount: no wait changes it',
      S.CANCELLED,
      null,
      change(S.PREPARED, { cause: 'amount_above_cap' }),
      'amount_above_cap',
      'dispatch',
      'policy',
      false,
    ],
    [
      'an amount a spending cap cannot count (unreadable, another currency): no wait changes it',
      S.CANCELLED,
      null,
      change(S.PREPARED, { cause: 'spending_cap_unmeasurable' }),
      'spending_cap_unmeasurable',
      'dispatch',
      'policy',
      false,
    ],
    [
      'another send of its reference was unsettled when it was to be sent: never sent, retryable once that one settles',
      S.CANCELLED,
      null,
      change(S.PREPARED, { cause: 'reference_unsettled' }),
      'reference_unsettled',
      'dispatch',
      'policy',
      true,
    ],
    [
      'a retry whose retried FAILED was contradicted since it was made: never sent, not retryable',
      S.CANCELLED,
      null,
      change(S.PREPARED, { cause: 'retry_refuted' }),
      'retry_refuted',
      'dispatch',
      'policy',
      false,
    ],
    [
      'execution cancelled',
      S.CANCELLED,
      null,
      change(S.PREPARED, { cause: 'execution_cancelled' }),
      'execution_cancelled',
      'dispatch',
      'caller_error',
      true,
    ],
    [
      'execution expired',
      S.CANCELLED,
      null,
      change(S.PREPARED, { cause: 'execution_expired' }),
      'execution_expired',
      'dispatch',
      'transient',
      true,
    ],
    [
      'execution invalid',
      S.CANCELLED,
      null,
      change(S.PREPARED, { cause: 'execution_invalid' }),
      'execution_invalid',
      'dispatch',
      'caller_error',
      false,
    ],
    [
      'cancelled by a reviewer',
      S.CANCELLED,
      null,
      change(S.MANUAL_REVIEW, { actor: 'human' }),
      'resolved_cancelled',
      'review',
      'human',
      false,
    ],
    // A never-sent hold the system ended with its execution: nobody decided, the execution's end is the cause.
    [
      'a hold cancelled with its cancelled execution',
      S.CANCELLED,
      R.KNOWLEDGE_CONFLICT,
      change(S.MANUAL_REVIEW, { actor: 'system', cause: 'execution_cancelled' }),
      'execution_cancelled',
      'dispatch',
      'caller_error',
      true,
    ],
    [
      'a hold cancelled with its expired execution',
      S.CANCELLED,
      R.SOURCE_UNREACHABLE,
      change(S.MANUAL_REVIEW, { actor: 'system', cause: 'execution_expired' }),
      'execution_expired',
      'dispatch',
      'transient',
      true,
    ],
    // Rows written before actors were recorded: out of MANUAL_REVIEW, a person decided.
    [
      'cancelled out of review, no actor recorded',
      S.CANCELLED,
      null,
      change(S.MANUAL_REVIEW),
      'resolved_cancelled',
      'review',
      'human',
      false,
    ],
    [
      'knowledge conflict',
      S.MANUAL_REVIEW,
      R.KNOWLEDGE_CONFLICT,
      change(S.PREPARED),
      'knowledge_conflict',
      'precondition',
      'caller_error',
      false,
    ],
    [
      'precondition unreadable',
      S.MANUAL_REVIEW,
      R.SOURCE_UNREACHABLE,
      change(S.PREPARED),
      'precondition_unreadable',
      'precondition',
      'transient',
      false,
    ],
    [
      'integrity mismatch at verification',
      S.MANUAL_REVIEW,
      R.INTEGRITY_MISMATCH,
      change(S.ACKNOWLEDGED),
      'integrity_mismatch',
      'verification',
      'human',
      false,
    ],
    [
      'integrity mismatch at reconciliation',
      S.MANUAL_REVIEW,
      R.INTEGRITY_MISMATCH,
      change(S.RECONCILING),
      'integrity_mismatch',
      'reconciliation',
      'human',
      false,
    ],
    [
      'stale replica at verification',
      S.MANUAL_REVIEW,
      R.STALE_REPLICA,
      change(S.ACKNOWLEDGED),
      'verification_inconclusive',
      'verification',
      'transient',
      false,
    ],
    [
      'reconciliation exhausted',
      S.MANUAL_REVIEW,
      R.CONNECTOR_ERROR,
      change(S.UNKNOWN),
      'outcome_unknown',
      'reconciliation',
      'transient',
      false,
    ],
  ])('%s', (_label, status, terminalReason, last, code, phase, category, retryable) => {
    const failure = operationFailure({ status, terminalReason }, last)!;
    expect(failure).toMatchObject({ code, phase, category, retryable, at: AT.toISOString() });
    expect(failure.message).toContain(FAILURE_CODES[code as keyof typeof FAILURE_CODES].message);
    if (terminalReason) expect(failure.message).toContain(terminalReason);
  });

  it('names the rule that refused a send, and never calls the refusal transient or retryable', () => {
    const refused = (refusal?: string) =>
      operationFailure(
        { status: S.FAILED, terminalReason: R.SOURCE_UNREACHABLE },
        change(S.SENT, { cause: EGRESS_REFUSED, refusal }),
      );
    expect(refused("host internal.example is not on this tenant's allowlist")).toEqual({
      code: 'egress_refused',
      phase: 'dispatch',
      category: 'policy',
      retryable: false,
      message:
        "never sent: the tenant's egress policy does not allow the target: host internal.example is not on this tenant's allowlist (terminal_reason SOURCE_UNREACHABLE)",
      at: AT.toISOString(),
    });
    // The address rules (SSRF) are the same policy: an allowlisted name that resolves to an internal address.
    expect(refused('localhost resolves to a loopback address, not allowed for this host')).toMatchObject({
      code: 'egress_refused',
      category: 'policy',
      retryable: false,
      message: expect.stringContaining('localhost resolves to a loopback address'),
    });
    // An event without the words still names the code and the reason.
    expect(refused()).toMatchObject({
      code: 'egress_refused',
      retryable: false,
      message: `${FAILURE_CODES.egress_refused.message}: terminal_reason SOURCE_UNREACHABLE`,
    });
    // A secret the call names and the tenant has not set: the same kind of refusal, naming the secret (never a value).
    expect(
      operationFailure(
        { status: S.FAILED, terminalReason: R.SOURCE_UNREACHABLE },
        change(S.SENT, { cause: SECRET_NOT_SET, refusal: 'secret "crm_token" is not set for this tenant' }),
      ),
    ).toEqual({
      code: 'secret_not_set',
      phase: 'dispatch',
      category: 'policy',
      retryable: false,
      message:
        'never sent: a secret the call names is not set for this tenant: secret "crm_token" is not set for this tenant (terminal_reason SOURCE_UNREACHABLE)',
      at: AT.toISOString(),
    });
    // A secret the allowlist entry of the call's host does not bind: refused by rule too, naming the secret and the host.
    const unboundRule =
      'secret "crm_token" may not be sent to echo.example:443: the tenant\'s allowlist entry for it does not bind it (allow_hosts[].secrets)';
    expect(
      operationFailure(
        { status: S.FAILED, terminalReason: R.SOURCE_UNREACHABLE },
        change(S.SENT, { cause: SECRET_NOT_BOUND, refusal: unboundRule }),
      ),
    ).toEqual({
      code: 'secret_not_bound',
      phase: 'dispatch',
      category: 'policy',
      retryable: false,
      message: `never sent: a secret the call names may not be sent to its host: ${unboundRule} (terminal_reason SOURCE_UNREACHABLE)`,
      at: AT.toISOString(),
    });
    // A call that never left for a network reason (no refusal recorded) stays what it was: it may pass.
    expect(operationFailure({ status: S.FAILED, terminalReason: R.SOURCE_UNREACHABLE }, change(S.SENT))).toMatchObject({
      code: 'never_delivered',
      category: 'transient',
      retryable: true,
    });
  });

  it('is null for VERIFIED and for everything still in flight or acknowledged', () => {
    for (const status of [S.PREPARED, S.SENT, S.ACKNOWLEDGED, S.VERIFIED, S.UNKNOWN, S.RECONCILING]) {
      expect(operationFailure({ status, terminalReason: null }, change(S.PREPARED))).toBeNull();
    }
  });

  it('is never null for FAILED, CANCELLED and MANUAL_REVIEW, and says so when the records cannot explain it', () => {
    for (const status of [S.FAILED, S.CANCELLED]) {
      expect(operationFailure({ status, terminalReason: null }, null)).toMatchObject({
        code: 'unexplained',
        category: 'internal',
        phase: 'dispatch',
        at: new Date(0).toISOString(),
      });
    }
    expect(operationFailure({ status: S.MANUAL_REVIEW, terminalReason: null }, change(S.PREPARED))).toMatchObject({
      code: 'unexplained',
      phase: 'precondition',
    });
  });

  it('uses only the six categories, and every code names a real status', () => {
    const statuses: string[] = [...OPERATION_STATUSES, ...Object.values(E)];
    for (const info of Object.values(FAILURE_CODES)) {
      expect(FAILURE_CATEGORIES).toContain(info.category);
      expect(statuses).toContain(info.status);
    }
    expect([...FAILURE_CATEGORIES].sort()).toEqual(
      ['caller_error', 'human', 'internal', 'policy', 'provider_rejected', 'transient'].sort(),
    );
  });
});

describe('operationFailure of a FAILED refuted since (a late 2xx, or a read after it that showed the effect)', () => {
  it('is never retryable: "proven absent" no longer stands, and re-sending could make the effect twice', () => {
    const refuted = operationFailure(
      { status: S.FAILED, terminalReason: R.PROVEN_ABSENT, failureRefuted: true },
      change(S.RECONCILING),
    );
    expect(refuted).toMatchObject({ code: 'proven_absent', retryable: false });
    expect(refuted?.message).toMatch(/contradicted since/);
    // Not refuted: as before.
    expect(
      operationFailure(
        { status: S.FAILED, terminalReason: R.PROVEN_ABSENT, failureRefuted: false },
        change(S.RECONCILING),
      ),
    ).toMatchObject({ code: 'proven_absent', retryable: true });
    // Only a FAILED is refuted.
    expect(
      operationFailure(
        { status: S.CANCELLED, terminalReason: null, failureRefuted: true },
        change(S.PREPARED, { cause: 'execution_cancelled' }),
      ),
    ).toMatchObject({ retryable: true });
  });
});

describe('executionFailure', () => {
  it('names the phase it stopped in and the time', () => {
    expect(executionFailure('cancelled_by_caller', E.RUNNING, AT)).toEqual({
      code: 'cancelled_by_caller',
      phase: 'running',
      category: 'caller_error',
      retryable: true,
      message: FAILURE_CODES.cancelled_by_caller.message,
      at: AT.toISOString(),
    });
  });

  it('tells an expiry while waiting for a person from one while waiting for a tool', () => {
    expect(executionFailure('deadline_exceeded', E.WAITING_FOR_TOOL, AT)).toMatchObject({
      code: 'deadline_exceeded',
      category: 'transient',
      retryable: true,
    });
    expect(executionFailure('deadline_exceeded', E.WAITING_FOR_APPROVAL, AT)).toMatchObject({
      code: 'approval_timed_out',
      category: 'human',
      phase: 'waiting_for_approval',
    });
  });

  it('is not retryable once one of its operations was sent: submitted again, it would be sent again', () => {
    const unsent = { attempt: 0 };
    const sent = { attempt: 1 };
    expect(executionFailure('cancelled_by_caller', E.RUNNING, AT, undefined, [unsent, unsent])).toMatchObject({
      retryable: true,
      message: FAILURE_CODES.cancelled_by_caller.message,
    });
    expect(executionFailure('cancelled_by_caller', E.RUNNING, AT, undefined, [sent, unsent])).toMatchObject({
      code: 'cancelled_by_caller',
      retryable: false,
      message: `${FAILURE_CODES.cancelled_by_caller.message}; one of its operations was sent: submitted again unchanged, it would send them again`,
    });
    expect(executionFailure('deadline_exceeded', E.WAITING_FOR_TOOL, AT, undefined, [sent, sent])).toMatchObject({
      code: 'deadline_exceeded',
      retryable: false,
      message: expect.stringContaining('2 of its operations were sent'),
    });
    // Not retryable anyway: nothing to add.
    expect(executionFailure('invalid_request', E.VALIDATING, AT, undefined, [sent])).toMatchObject({
      retryable: false,
      message: FAILURE_CODES.invalid_request.message,
    });
  });

  it('appends a detail to the message', () => {
    expect(executionFailure('invalid_request', E.VALIDATING, AT, 'charge: bad params').message).toBe(
      `${FAILURE_CODES.invalid_request.message}: charge: bad params`,
    );
  });
});

describe('spendingCapRefusalCause: beyond a cap, or an amount it cannot count', () => {
  it.each([
    ['max_operations', 'spending_cap_exceeded'],
    ['max_amount', 'spending_cap_exceeded'],
    ['amount_unreadable', 'spending_cap_unmeasurable'],
    ['currency_mismatch', 'spending_cap_unmeasurable'],
  ])('%s → %s', (rule, cause) => {
    expect(spendingCapRefusalCause({ rule, requested: 10, maxAmount: 1000 })).toBe(cause);
  });

  it('an amount above the cap’s own max_amount: amount_above_cap, which no window passes', () => {
    expect(spendingCapRefusalCause({ rule: 'max_amount', requested: 1000.5, maxAmount: 1000 })).toBe(
      'amount_above_cap',
    );
    // At the cap exactly, an empty window has room for it: beyond only this window's usage.
    expect(spendingCapRefusalCause({ rule: 'max_amount', requested: 1000, maxAmount: 1000 })).toBe(
      'spending_cap_exceeded',
    );
    // A cap on operations, or an amount the cap did not read: the amount says nothing about the window.
    expect(spendingCapRefusalCause({ rule: 'max_operations', requested: null, maxAmount: 1000 })).toBe(
      'spending_cap_exceeded',
    );
    expect(spendingCapRefusalCause({ rule: 'max_amount', requested: 5000 })).toBe('spending_cap_exceeded');
  });
});

describe('cancelledAsRefutedRetry: a retry the dispatch cancelled because the FAILED it retries was contradicted', () => {
  it('is a CANCELLED whose last move says retry_refuted, and nothing else', () => {
    expect(cancelledAsRefutedRetry(S.CANCELLED, change(S.PREPARED, { cause: RETRY_REFUTED }))).toBe(true);
    expect(cancelledAsRefutedRetry(S.CANCELLED, change(S.PREPARED, { cause: 'execution_cancelled' }))).toBe(false);
    expect(cancelledAsRefutedRetry(S.CANCELLED, null)).toBe(false);
    expect(cancelledAsRefutedRetry(S.FAILED, change(S.PREPARED, { cause: RETRY_REFUTED }))).toBe(false);
  });
});

describe('refutedRetryCancel: what the cancel of such a retry records, whoever writes it', () => {
  it('names the cause, why, and the operation it retries', () => {
    const data = refutedRetryCancel('op_1');
    expect(data).toMatchObject({ cause: RETRY_REFUTED, retry_of: 'op_1' });
    expect(data.detail).toContain('(op_1)');
    expect(cancelledAsRefutedRetry(S.CANCELLED, change(S.PREPARED, data))).toBe(true);
  });
});
