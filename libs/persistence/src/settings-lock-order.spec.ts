import { OperationStatus, VerificationMethod } from '@verity/status-model';
import { chargeOperation, insertTestExecution } from '../../../test/support/fixtures';
import { waitForLockWaiter } from '../../../test/support/lock-waits';
import { withSessions } from '../../../test/support/sessions';
import { useTestDatabase } from '../../../test/support/test-database';
import { clearConnectorSettings, upsertConnectorSettings } from './connector-settings.repository';
import { CONNECTOR_SPEND_SQL, commitWithinSpendingCaps, lockSpendingCaps } from './entities';
import type { SendGuard } from './send-guard';
import { sqlState } from './sql';
import { NewOperation } from './store';
import { TransitionService } from './transition.service';

/**
 * Every send takes the connector settings' lock before any row or turn: exclusively when it is capped (the caps' turn),
 * shared when it is not (what the SENT statement's `settings_changed` takes again). An uncapped send whose own rows or
 * turns came first — a release locks its operation and execution, a send naming a `resend_ref` takes the reference's
 * turn — waited in its statement for the shared lock while a capped send held it exclusively and waited for those rows
 * or that turn: Postgres aborted one side (40P01). It happens when a cap was added between the two sends' reads of the
 * settings (the first read none, the second the cap). The capped send here runs in a transaction that is not retried,
 * and the uncapped one records every error its statement meets before commitWithinSpendingCaps retries it: a deadlock
 * shows on either side.
 */
describe('the settings lock before rows, for capped and uncapped sends alike (real Postgres)', () => {
  const db = useTestDatabase('settingslockorder', ['acme']);
  const transitions = new TransitionService();
  const CONNECTOR = 'sandbox.payments';
  const cap = { period: 'day' as const, max_operations: 100 };

  afterEach(async () => clearConnectorSettings(db.dataSource.manager, 'acme', CONNECTOR));

  async function runningExecution(operations: NewOperation[]) {
    const executionId = await insertTestExecution(db.dataSource.manager, 'acme', { operations });
    await db.dataSource.query(`UPDATE executions SET status = 'running' WHERE id = $1`, [executionId]);
    return executionId;
  }

  const sendOf = (id: string, from: OperationStatus, guard: SendGuard) => ({
    operation: { id, status: from, attempt: 0, verificationMethod: VerificationMethod.READ_AFTER_WRITE },
    to: OperationStatus.SENT,
    actor: guard.kind === 'release' ? ('human' as const) : ('system' as const),
    bumpAttempt: true,
    patch: { sent_at: 'now' as const },
    sendGuard: guard,
  });

  /**
   * `capped` holds the cap's lock (exclusive) from the start; the uncapped send starts and waits (for the lock, or for
   * what `capped` takes next); then `capped` goes on (`next`: what it takes after the lock, its SENT statement) and
   * commits. Answers what each side answered and the SQLSTATE of every error the uncapped send's statement met.
   */
  async function race(
    uncapped: (recordErrors: <T>(work: () => Promise<T>) => Promise<T>) => Promise<unknown>,
    next: (tx: import('typeorm').EntityManager) => Promise<{ won: boolean }>,
  ) {
    const errors: (string | undefined)[] = [];
    const recordErrors = async <T>(work: () => Promise<T>): Promise<T> => {
      try {
        return await work();
      } catch (error) {
        errors.push(sqlState(error));
        throw error;
      }
    };
    return withSessions(db.dataSource, ['capped'], async ({ capped }) => {
      await capped.startTransaction();
      await lockSpendingCaps(capped.manager, 'acme', CONNECTOR);
      let settled = false;
      const sending = uncapped(recordErrors).finally(() => (settled = true));
      sending.catch(() => undefined);
      // The uncapped send waits (not slept on: its backend shows a lock wait).
      await waitForLockWaiter(db.dataSource, { unless: () => settled });
      const sent = await next(capped.manager);
      await capped.commitTransaction();
      return { capped: sent, uncapped: await sending, errors };
    });
  }

  /** A send of `operationId` with no cap of its own, as commitWithinSpendingCaps makes it (`first`: what it takes first). */
  const uncappedSend = (
    operationId: string,
    first: { lockOperationFirst?: boolean; resendRef?: string },
    write: Parameters<typeof commitWithinSpendingCaps>[2],
  ) =>
    commitWithinSpendingCaps(
      db.dataSource,
      { tenantId: 'acme', connector: CONNECTOR, operationId, caps: [], amountOf: () => null, ...first },
      write,
    );

  it('a release read before a cap was set, beside a capped send of the same execution: no deadlock', async () => {
    // The release was read with no settings stored (version null); an admin then set a cap, and a send of another
    // operation of the execution read it. The release locks its operation and its execution first (lockOperationFirst).
    const held = chargeOperation({ key: 'held' });
    const capped = chargeOperation({ key: 'capped', position: 1 });
    await runningExecution([held, capped]);
    await db.dataSource.query(
      `UPDATE operations SET status = 'MANUAL_REVIEW', terminal_reason = 'KNOWLEDGE_CONFLICT',
              obligation = '{"resolution": {"status": "SENT"}}' WHERE id = $1`,
      [held.id],
    );
    await upsertConnectorSettings(db.dataSource.manager, 'acme', CONNECTOR, { spendingCaps: [cap], by: 'admin' });
    const release: SendGuard = { kind: 'release', settingsVersion: null };
    const result = await race(
      (recordErrors) =>
        uncappedSend(held.id, { lockOperationFirst: true }, (tx) =>
          recordErrors(() => transitions.operation(tx, sendOf(held.id, OperationStatus.MANUAL_REVIEW, release))),
        ),
      (tx) =>
        transitions.operation(
          tx,
          sendOf(capped.id, OperationStatus.PREPARED, { kind: 'dispatch', approvalRequired: false }),
        ),
    );
    expect(result.errors).toEqual([]);
    expect(result.capped).toMatchObject({ won: true });
    // Prepared from the settings before the cap: refused, to be prepared again from it.
    expect(result.uncapped).toEqual({ sent: { won: false } });
  });

  it('a send naming a resend_ref read before a cap was set, beside a capped send of the same reference: no deadlock', async () => {
    const first = chargeOperation({ key: 'first', resend_ref: 'ref-1' });
    const second = chargeOperation({ key: 'second', resend_ref: 'ref-1' });
    await runningExecution([first]);
    await runningExecution([second]);
    await upsertConnectorSettings(db.dataSource.manager, 'acme', CONNECTOR, { spendingCaps: [cap], by: 'admin' });
    const dispatch: SendGuard = { kind: 'dispatch', approvalRequired: false, settingsVersion: null };
    const result = await race(
      (recordErrors) =>
        uncappedSend(first.id, { resendRef: 'ref-1' }, (tx) =>
          recordErrors(() => transitions.operation(tx, sendOf(first.id, OperationStatus.PREPARED, dispatch))),
        ),
      async (tx) => {
        // What commitWithinSpendingCaps takes after the cap's lock for a send naming a reference: its turn.
        await tx.query(CONNECTOR_SPEND_SQL.resendLock, ['acme', CONNECTOR, 'ref-1']);
        return transitions.operation(
          tx,
          sendOf(second.id, OperationStatus.PREPARED, { kind: 'dispatch', approvalRequired: false }),
        );
      },
    );
    expect(result.errors).toEqual([]);
    expect(result.capped).toMatchObject({ won: true });
    expect(result.uncapped).toEqual({ sent: { won: false } });
  });
});
