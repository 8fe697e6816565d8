import { OperationEntity, preparedOperation, recoveryObligation } from '@verity/persistence';
import { ExecutionStatus, OperationStatus, TerminalReason, resolutionOptions } from '@verity/status-model';
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

/** What resolve judges for it (ResolutionOptionsService): its execution running or ended, its dependencies done. */
const judged = (executionStatus = ExecutionStatus.RUNNING) =>
  resolutionOptions({
    status: OperationStatus.MANUAL_REVIEW,
    everSent: false,
    heldFor: TerminalReason.SOURCE_UNREACHABLE,
    canReadBack: true,
    release: { executionStatus, deadlinePassed: false, dependencies: 'done' },
  });

describe('the obligation of a hold, as the API shows it', () => {
  it('permits what resolve accepts while nobody has decided: the release and the cancel, or only the cancel', () => {
    expect(presentOperation(heldNeverSent(), null, judged()).recovery_obligation?.permitted_actions).toEqual([
      'SENT',
      'CANCELLED',
    ]);
    // A release of an ended execution is refused: not offered either.
    expect(
      presentOperation(heldNeverSent(), null, judged(ExecutionStatus.CANCELLED)).recovery_obligation?.permitted_actions,
    ).toEqual(['CANCELLED']);
    // Not judged (nothing is permitted on it): nothing offered.
    expect(presentOperation(heldNeverSent(), null).recovery_obligation?.permitted_actions).toEqual([]);
  });

  it('permits nothing more once a resolution is recorded (a release the dispatcher has not carried out yet)', () => {
    // The API refuses any other resolution with 409 already-decided: the list must not offer one.
    const shown = presentOperation(
      heldNeverSent({ status: 'SENT', by: 'key_reviewer', at: '2026-12-03T12:01:00Z' }),
      null,
      judged(),
    );
    expect(shown.status).toBe('MANUAL_REVIEW');
    expect(shown.recovery_obligation?.permitted_actions).toEqual([]);
  });

  it('lists no action on a closed obligation: the operation left the hold', () => {
    const verified = Object.assign(heldNeverSent({ status: 'SENT', by: 'key_reviewer', at: '2026-12-03T12:01:00Z' }), {
      status: OperationStatus.VERIFIED,
      terminalReason: null,
      attempt: 1,
    });
    // The list stored when the hold was written is no action anyone can take now.
    expect(verified.obligation!.permitted_actions).toEqual(['SENT', 'CANCELLED']);
    expect(presentOperation(verified, null, judged()).recovery_obligation?.permitted_actions).toEqual([]);
  });
});
