import { insertChargeExecution } from '../../../test/support/fixtures';
import { waitForLockWaiter } from '../../../test/support/lock-waits';
import { withSessions } from '../../../test/support/sessions';
import { useTestDatabase } from '../../../test/support/test-database';
import { SEND_NOTE_SQL, SEND_SECRETS_UNOPENED_EVENT, recordSendSecretsUnopened } from './store';
import { TransitionService } from './transition.service';

/** A send whose tenant secrets do not open: said once per operation, however often (or concurrently) it is retried. */
describe('recordSendSecretsUnopened (real Postgres)', () => {
  const db = useTestDatabase('sendnotes', ['acme']);
  const notes = async (operationId: string) =>
    (await db.dataSource.query(`SELECT type, data FROM events WHERE operation_id = $1 AND type = $2`, [
      operationId,
      SEND_SECRETS_UNOPENED_EVENT,
    ])) as { type: string; data: unknown }[];

  it('writes the event on the first try only, with the error class and nothing else', async () => {
    const { operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    expect(await recordSendSecretsUnopened(db.dataSource, operationId, 'SecretUnreadableError')).toBe(true);
    expect(await recordSendSecretsUnopened(db.dataSource, operationId, 'SecretUnreadableError')).toBe(false);
    expect(await notes(operationId)).toEqual([
      { type: SEND_SECRETS_UNOPENED_EVENT, data: { error: 'SecretUnreadableError', sent: false } },
    ]);
    expect(await recordSendSecretsUnopened(db.dataSource, 'op_never_made', 'SecretUnreadableError')).toBe(false);
  });

  it('a try made while another is writing the event waits for it, then writes none', async () => {
    const { executionId, operationId } = await insertChargeExecution(db.dataSource.manager, 'acme');
    await withSessions(db.dataSource, ['other'], async ({ other }) => {
      await other.startTransaction();
      await other.query(SEND_NOTE_SQL.lockOperation, [operationId]);
      await new TransitionService().annotate(other.manager, {
        executionId,
        operationId,
        oncePerOperation: true,
        eventId: 'evt_other_try',
        type: SEND_SECRETS_UNOPENED_EVENT,
        data: { error: 'SecretUnreadableError', sent: false },
      });
      let answered = false;
      const second = recordSendSecretsUnopened(db.dataSource, operationId, 'SecretUnreadableError').finally(
        () => (answered = true),
      );
      await waitForLockWaiter(db.dataSource, { unless: () => answered });
      await other.commitTransaction();
      expect(await second).toBe(false);
      expect(await notes(operationId)).toHaveLength(1);
    });
  });
});
