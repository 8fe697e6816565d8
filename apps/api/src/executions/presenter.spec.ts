import { OperationEntity, preparedOperation, recoveryObligation } from '@verity/persistence';
import { OperationStatus, TerminalReason } from '@verity/status-model';
import { presentOperation } from './presenter';
import { chargeOperation } from '../../../../test/support/fixtures';

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
  const charge = chargeOperation({ id: 'op_1', params: { amount: 100, currency: 'EUR', reference: 'order-1' } });
  return Object.assign(preparedOperation(charge, { id: 'exe_1', tenantId: 'demo' }, now), {
    status: OperationStatus.MANUAL_REVIEW,
    terminalReason: TerminalReason.SOURCE_UNREACHABLE,
    obligation: resolution ? { ...obligation, resolution } : obligation,
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
