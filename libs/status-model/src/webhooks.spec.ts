import { ExecutionStatus } from './execution';
import { OperationStatus, VerificationMethod } from './operation';
import { WEBHOOK_EVENT_TYPES, webhookEventFor } from './webhooks';

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

  it('announces a re-check that found the effect after a reviewer wrote FAILED as needing review, and no other', () => {
    expect(webhookEventFor({ type: 'operation.rechecked', toStatus: null, after: 'FAILED' })).toBe(
      'operation.needs_review',
    );
    expect(webhookEventFor({ type: 'operation.rechecked', toStatus: null })).toBeNull();
    expect(webhookEventFor({ type: 'operation.rechecked', toStatus: null, after: 'VERIFIED' })).toBeNull();
  });

  it('announces a 2xx that came back after the operation was recorded FAILED as needing review, and no other', () => {
    expect(webhookEventFor({ type: 'operation.acknowledged_late', toStatus: null, after: 'FAILED' })).toBe(
      'operation.needs_review',
    );
    // Recorded while the outcome is still to be decided: history alone (the hold was announced already).
    expect(webhookEventFor({ type: 'operation.acknowledged_late', toStatus: null })).toBeNull();
  });

  it('announces a rejection that came back after the operation was recorded VERIFIED as needing review, and no other', () => {
    expect(webhookEventFor({ type: 'operation.rejected_late', toStatus: null, after: 'VERIFIED' })).toBe(
      'operation.needs_review',
    );
    // Recorded while the outcome is still to be decided: history alone (the hold was announced already).
    expect(webhookEventFor({ type: 'operation.rejected_late', toStatus: null })).toBeNull();
    expect(webhookEventFor({ type: 'operation.rejected_late', toStatus: null, after: 'FAILED' })).toBeNull();
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
});
