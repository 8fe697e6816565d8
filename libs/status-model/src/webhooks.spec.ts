import { ExecutionStatus } from './execution';
import { OperationStatus, VerificationMethod } from './operation';
import {
  WEBHOOK_EVENT_TYPES,
  webhookAttemptSkippedByDisable,
  webhookEventFor,
  webhookOwedTo,
  webhookSkippedByDisable,
} from './webhooks';

describe('webhookEventFor', () => {
  const op = (to: OperationStatus, verificationMethod: VerificationMethod | '' = VerificationMethod.READ_AFTER_WRITE) =>
    webhookEventFor({ type: 'operation.status_changed', toStatus: to, verificationMethod });

  it('announces VERIFIED, FAILED and CANCELLED operations as settled', () => {
    expect(op(OperationStatus.VERIFIED)).toBe('operation.settled');
    expect(op(OperationStatus.FAILED)).toBe('operation.settled');
    expect(op(OperationStatus.CANCELLED)).toBe('operation.settled');
  });

  it('announces ACKNOWLEDGED as settled only when nothing will read it back', () => {
    expect(op(OperationStatus.ACKNOWLEDGED, '')).toBe('operation.settled');
    expect(op(OperationStatus.ACKNOWLEDGED)).toBeNull();
    expect(webhookEventFor({ type: 'operation.status_changed', toStatus: 'ACKNOWLEDGED' })).toBe('operation.settled');
  });

  it('announces MANUAL_REVIEW as needing review, and in-flight statuses not at all', () => {
    expect(op(OperationStatus.MANUAL_REVIEW)).toBe('operation.needs_review');
    for (const s of [OperationStatus.SENT, OperationStatus.UNKNOWN, OperationStatus.RECONCILING])
      expect(op(s)).toBeNull();
  });

  // What contradicts a final status needs a person; the same event while the outcome was still to be decided (no
  // `after`), or after the other final status, is history alone (a hold was announced already).
  it.each([
    {
      what: 'a re-check that found the effect after a reviewer wrote FAILED',
      type: 'operation.rechecked',
      after: 'FAILED',
      not: 'VERIFIED',
    },
    {
      what: 'a 2xx that came back after the operation was recorded FAILED',
      type: 'operation.acknowledged_late',
      after: 'FAILED',
      not: 'VERIFIED',
    },
    {
      what: 'a rejection that came back after the operation was recorded VERIFIED',
      type: 'operation.rejected_late',
      after: 'VERIFIED',
      not: 'FAILED',
    },
  ])('announces $what as needing review, and no other', ({ type, after, not }) => {
    expect(webhookEventFor({ type, toStatus: null, after })).toBe('operation.needs_review');
    expect(webhookEventFor({ type, toStatus: null })).toBeNull();
    expect(webhookEventFor({ type, toStatus: null, after: not })).toBeNull();
  });

  it('announces an execution once it reaches a terminal status', () => {
    const exe = (to: ExecutionStatus) => webhookEventFor({ type: 'execution.status_changed', toStatus: to });
    expect(exe(ExecutionStatus.COMPLETED)).toBe('execution.finished');
    expect(exe(ExecutionStatus.EXPIRED)).toBe('execution.finished');
    expect(exe(ExecutionStatus.RUNNING)).toBeNull();
  });

  it('passes escalations and outcome evaluations through, and ignores everything else', () => {
    expect(webhookEventFor({ type: 'obligation.escalated', toStatus: null })).toBe('obligation.escalated');
    expect(webhookEventFor({ type: 'outcome.evaluated', toStatus: null })).toBe('outcome.evaluated');
    expect(webhookEventFor({ type: 'approval.requested', toStatus: null })).toBeNull();
    expect(WEBHOOK_EVENT_TYPES).toContain('webhook.disabled');
  });

  it('owes an event to a subscribed endpoint enabled when it happened, also when disabled since', () => {
    const at = new Date('2026-01-01T00:00:00Z');
    const endpoint = (disabledAt: Date | null) => ({
      events: ['execution.finished'],
      createdAt: new Date(0),
      disabledAt,
      lastDisabledAt: null,
      reenabledAt: null,
    });
    expect(webhookOwedTo(endpoint(null), 'execution.finished', at)).toBe(true);
    expect(webhookOwedTo(endpoint(null), 'outcome.evaluated', at)).toBe(false);
    // Disabled after the event: still owed (recorded, skipped at its turn, redeliverable).
    expect(webhookOwedTo(endpoint(new Date(at.getTime() + 1)), 'execution.finished', at)).toBe(true);
    // The event happened while it was disabled: not owed.
    expect(webhookOwedTo(endpoint(at), 'execution.finished', at)).toBe(false);
    expect(webhookOwedTo(endpoint(new Date(at.getTime() - 1)), 'execution.finished', at)).toBe(false);
  });

  it('owes an event the pass reaches late neither to an endpoint created after it nor across its last disabled time', () => {
    const t = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s));
    const endpoint = { events: ['execution.finished'], createdAt: t(10), disabledAt: null };
    const owed = (e: Parameters<typeof webhookOwedTo>[0], at: Date) => webhookOwedTo(e, 'execution.finished', at);
    const never = { ...endpoint, lastDisabledAt: null, reenabledAt: null };
    expect(owed(never, t(9))).toBe(false);
    expect(owed(never, t(10))).toBe(true);
    // Disabled at 20, enabled again at 30: what happened in between is not owed, before and after it is.
    const reenabled = { ...endpoint, lastDisabledAt: t(20), reenabledAt: t(30) };
    expect(owed(reenabled, t(19))).toBe(true);
    expect(owed(reenabled, t(20))).toBe(false);
    expect(owed(reenabled, t(29))).toBe(false);
    expect(owed(reenabled, t(30))).toBe(true);
  });

  it('writes an owed event skipped when the endpoint was disabled after it happened, whenever the pass reaches it', () => {
    const t = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s));
    const base = { events: ['execution.finished'], createdAt: t(10) };
    const skipped = (e: Parameters<typeof webhookSkippedByDisable>[0], at: Date) => webhookSkippedByDisable(e, at);
    // Never disabled: sent.
    expect(skipped({ ...base, disabledAt: null, lastDisabledAt: null }, t(15))).toBe(false);
    // Disabled now, the event before it: the disable skipped what was pending, so this one too.
    expect(skipped({ ...base, disabledAt: t(20), lastDisabledAt: null }, t(15))).toBe(true);
    // Disabled at 20 and enabled again at 30: an event before 20 was skipped by that disable; one after 30 is sent.
    const reenabled = { ...base, disabledAt: null, lastDisabledAt: t(20), reenabledAt: t(30) };
    expect(skipped(reenabled, t(19))).toBe(true);
    expect(skipped(reenabled, t(30))).toBe(false);
    // Disabled again at 40 after that enable: an event at 35 is skipped by the second disable.
    expect(skipped({ ...reenabled, disabledAt: t(40) }, t(35))).toBe(true);
  });

  it('skips an attempt at its turn on a disabled endpoint, or of a first round owed before the last disable', () => {
    const t = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s));
    const skipped = webhookAttemptSkippedByDisable;
    // Disabled now: skipped, a redelivery too.
    expect(skipped({ disabledAt: t(20), lastDisabledAt: null }, t(15), 0)).toBe(true);
    expect(skipped({ disabledAt: t(20), lastDisabledAt: null }, t(15), 1)).toBe(true);
    // Disabled at 20, enabled again since: the first round of an event before 20 is skipped (the enable does not send
    // it); a redelivery of it is sent; an event after the disable is sent.
    const reenabled = { disabledAt: null, lastDisabledAt: t(20) };
    expect(skipped(reenabled, t(19), 0)).toBe(true);
    expect(skipped(reenabled, t(19), 1)).toBe(false);
    expect(skipped(reenabled, t(31), 0)).toBe(false);
    // Never disabled: sent.
    expect(skipped({ disabledAt: null, lastDisabledAt: null }, t(15), 0)).toBe(false);
  });
});
