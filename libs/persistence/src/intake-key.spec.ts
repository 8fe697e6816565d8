import { newId } from '@verity/platform';
import { chargeOperation, insertStandingKeys } from '../../../test/support/fixtures';
import { waitForLockWaiter, writeDuringRevocation } from '../../../test/support/lock-waits';
import { useTestDatabase } from '../../../test/support/test-database';
import { revokeApiKey } from './api-keys';
import { Queryable } from './sql';
import { insertExecution } from './store';

/**
 * The intake statement writes a submission only while the key that submits stands (`submittedBy`), checked and
 * share-locked in the statement itself: a revocation that answered is never followed by a new execution of its key,
 * also when the request was admitted on a cached copy of the key, or its statement ran while the revocation committed.
 */
describe('intake writes a submission only while its key stands (real Postgres)', () => {
  const db = useTestDatabase('intakekey', ['acme', 'other']);
  beforeAll(async () => {
    await insertStandingKeys(db.dataSource.manager, 'acme', ['key_agent', 'key_gone', 'key_racing', 'key_late']);
    await insertStandingKeys(db.dataSource.manager, 'other', ['key_other']);
  });

  /** A submission of one charge by `submittedBy`, written through `db` (default: on its own, committed at once). */
  const submission = (
    id: string,
    submittedBy: string,
    idempotencyKey: string | null = null,
    on: Queryable = db.dataSource.manager,
  ) =>
    insertExecution(on, {
      id,
      tenantId: 'acme',
      agentId: 'agent',
      intent: 'charge',
      deadlineSeconds: 600,
      criteria: [],
      idempotencyKey,
      idempotency: idempotencyKey ? { requestHash: 'h', ttlMs: 60_000, abandonAfterMs: 60_000 } : undefined,
      operations: [chargeOperation()],
      createdEventId: newId('evt'),
      submittedBy,
    });
  const submit = (submittedBy: string, idempotencyKey: string | null = null) => {
    const id = newId('exe');
    return submission(id, submittedBy, idempotencyKey).then((written) => ({ id, written }));
  };

  const written = async (id: string) => {
    const [{ executions, operations, events }] = (await db.dataSource.query(
      `SELECT (SELECT count(*)::int FROM executions WHERE id = $1) AS executions,
              (SELECT count(*)::int FROM operations WHERE execution_id = $1) AS operations,
              (SELECT count(*)::int FROM events WHERE execution_id = $1) AS events`,
      [id],
    )) as { executions: number; operations: number; events: number }[];
    return { executions, operations, events };
  };
  const nothing = { executions: 0, operations: 0, events: 0 };

  it('a key that stands submits; one revoked before the statement, or of another tenant, submits nothing', async () => {
    const standing = await submit('key_agent');
    expect(standing.written).toHaveProperty('createdAt');
    expect(await written(standing.id)).toEqual({ executions: 1, operations: 1, events: 1 });

    // Revoked (and committed) after the request was admitted on it: nothing written, its Idempotency-Key not taken.
    expect(await revokeApiKey(db.dataSource.manager, 'key_gone')).toBe(true);
    const gone = await submit('key_gone', 'idem-gone');
    expect(gone.written).toBe('revoked');
    expect(await written(gone.id)).toEqual(nothing);
    expect(await db.dataSource.query(`SELECT key FROM idempotency_keys WHERE key = 'idem-gone'`)).toEqual([]);

    const other = await submit('key_other');
    expect(other.written).toBe('revoked');
    expect(await written(other.id)).toEqual(nothing);
  });

  it('a revocation under way when the statement runs is waited for, and then refuses it', async () => {
    // Proven waiting on the revocation's row lock (not slept on); a statement that does not wait answers first.
    const { id, written: answer } = await writeDuringRevocation(db.dataSource, 'key_racing', () =>
      submit('key_racing'),
    );
    expect(answer).toBe('revoked');
    expect(await written(id)).toEqual(nothing);
  });

  it('a revocation made while a submission is being written waits for it: it answers after the execution exists', async () => {
    const runner = db.dataSource.createQueryRunner();
    await runner.connect();
    const id = newId('exe');
    try {
      // The intake statement has run and not committed yet (held open here, as a slow commit would be).
      await runner.startTransaction();
      const answer = await submission(id, 'key_late', null, runner.manager);
      expect(answer).toHaveProperty('createdAt');
      let revoked = false;
      const revoking = revokeApiKey(db.dataSource.manager, 'key_late').finally(() => (revoked = true));
      // Proven waiting on the submission's share lock of the key's row.
      await waitForLockWaiter(db.dataSource, { statementLike: '%api_keys%', unless: () => revoked });
      expect(revoked).toBe(false);
      await runner.commitTransaction();
      expect(await revoking).toBe(true);
      // By the time the revocation answered, the execution was committed: it came before the revocation, not after.
      expect(await written(id)).toEqual({ executions: 1, operations: 1, events: 1 });
    } finally {
      if (runner.isTransactionActive) await runner.rollbackTransaction();
      await runner.release();
    }
  });
});
