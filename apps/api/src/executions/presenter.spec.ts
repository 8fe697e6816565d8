import { OperationEntity, recoveryObligation } from '@verity/persistence';
import { OperationStatus, TerminalReason } from '@verity/status-model';
import { presentOperation } from './presenter';

/** A never-sent charge held because its precondition could not be read: a person may release it or cancel it. */
function heldNeverSent(resolution?: { status: string; by: string; at: string }): OperationEntity {
  const now = new Date('2026-12-03T12:00:00Z');
  const obligation = recoveryObligation({
    reason: TerminalReason.SOURCE_UNREACHABLE,
    everSent: false,
    settings: null,
    now,
    dueInMs: 3_600_000,
  });
  return Object.assign(new OperationEntity(), {
    id: 'op_1',
    executionId: 'exe_1',
    tenantId: 'demo',
    key: 'charge',
    generation: 0,
    position: 0,
    connector: 'sandbox.payments',
    action: 'charge',
    params: { amount: 100, currency: 'EUR', reference: 'order-1' },
    irreversible: true,
    requiresApproval: false,
    verificationMethod: 'read_after_write',
    expectedState: null,
    dependsOn: [],
    status: OperationStatus.MANUAL_REVIEW,
    terminalReason: TerminalReason.SOURCE_UNREACHABLE,
    attempt: 0,
    evidence: null,
    noChangeRequired: false,
    retryOf: null,
    approval: null,
    obligation: resolution ? { ...obligation, resolution } : obligation,
    observation: null,
    providerRef: null,
    checkCount: 0,
    sentAt: null,
    acknowledgedAt: null,
    nextCheckAt: null,
    createdAt: now,
    updatedAt: now,
  });
}

describe('the obligation of a hold, as the API shows it', () => {
  it('permits the release and the cancel while nobody has decided', () => {
    const shown = presentOperation(heldNeverSent(), null);
    expect(shown.recovery_obligation?.permitted_actions).toEqual(['SENT', 'CANCELLED']);
  });

  it('permits nothing more once a resolution is recorded (a release the dispatcher has not carried out yet)', () => {
    // The API refuses any other resolution with 409 already-decided: the list must not offer one.
    const shown = presentOperation(
      heldNeverSent({ status: 'SENT', by: 'key_reviewer', at: '2026-12-03T12:01:00Z' }),
      null,
    );
    expect(shown.status).toBe('MANUAL_REVIEW');
    expect(shown.recovery_obligation?.permitted_actions).toEqual([]);
  });
});
