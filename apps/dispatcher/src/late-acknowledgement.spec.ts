import { OperationStatus } from '@verity/status-model';
import { SenderService } from './sender.service';

/**
 * A provider's 2xx that lost its ACKNOWLEDGED compare-and-set to the sweeper is recorded wherever the operation is by
 * then (UNKNOWN, RECONCILING, MANUAL_REVIEW, FAILED). The reconciler moves it RECONCILING → UNKNOWN between reads: the
 * recording must not miss it for having looked in one status while it was in the other.
 */
describe('SenderService: a late acknowledgement is recorded while the operation moves between UNKNOWN and RECONCILING', () => {
  it('an operation that went back from RECONCILING to UNKNOWN during the recording still gets it', async () => {
    let status: OperationStatus = OperationStatus.RECONCILING;
    const tried: unknown[] = [];
    let recorded = false;
    const transitions = {
      annotate: async (_db: unknown, input: { whileStatus: OperationStatus | readonly OperationStatus[] }) => {
        tried.push(input.whileStatus);
        const allowed = Array.isArray(input.whileStatus) ? input.whileStatus : [input.whileStatus];
        const won = allowed.includes(status);
        recorded ||= won;
        // The reconciler's read was inconclusive: back to UNKNOWN right after this statement (which then missed it).
        if (!won && status === OperationStatus.RECONCILING) status = OperationStatus.UNKNOWN;
        return won ? { won: true, eventId: 'evt_1', seq: 1 } : { won: false };
      },
    };
    const sender = new SenderService(
      { manager: {} } as never,
      transitions as never,
      {} as never,
      {} as never,
      {} as never,
      {} as never,
      {} as never,
    );
    const record = (
      sender as unknown as { recordLateAcknowledgement(op: unknown, ref: unknown): Promise<void> }
    ).recordLateAcknowledgement.bind(sender);
    await record({ id: 'op_1', executionId: 'exe_1' }, { id: 'sms_1' });
    // Tried one status at a time, UNKNOWN found it RECONCILING and RECONCILING found it UNKNOWN: the 2xx was dropped.
    expect(recorded).toBe(true);
  });
});
