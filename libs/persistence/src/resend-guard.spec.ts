import { randomUUID } from 'node:crypto';
import { OperationStatus, blocksResend } from '@verity/status-model';
import { newId } from '@verity/platform';
import type { EntityManager } from 'typeorm';
import { useTestDatabase } from '../../../test/support/test-database';
import { NewOperation, insertExecution } from './store';

/**
 * The intake statement's refusal of a blind re-send (`unsettled`), against the real Postgres: it writes nothing while an
 * operation of the tenant on the same connector naming the same resend_ref is in a status `blocksResend` (libs/status-model)
 * says blocks — the statement's predicate and the rule cannot disagree — and anything else writes.
 */
describe('intake refuses a re-send of an unsettled reference (real Postgres)', () => {
  const tenantId = 'acme';
  const db = useTestDatabase('resendguard', [tenantId, 'other']);

  const op = (resendRef: string | null, connector = 'sandbox.sms', position = 0): NewOperation => ({
    id: newId('op'),
    key: `k${position}`,
    position,
    connector,
    action: 'send',
    params: { to: '+15550100', body: 'x', ...(resendRef && { client_ref: resendRef }) },
    irreversible: true,
    requires_approval: false,
    verification_method: '',
    expected_state: null,
    depends_on: [],
    approval: null,
    resend_ref: resendRef,
  });

  const insert = (operations: NewOperation[], tenant = tenantId, manager: EntityManager = db.dataSource.manager) => {
    const id = newId('exe');
    return insertExecution(manager, {
      id,
      tenantId: tenant,
      agentId: 'agent',
      intent: 'notify',
      deadlineSeconds: 600,
      criteria: [],
      idempotencyKey: null,
      operations,
      createdEventId: newId('evt'),
    }).then((written) => ({ id, written }));
  };

  /** Puts the operation where a lifecycle would have (the statement reads only status and attempt). */
  const place = (id: string, status: OperationStatus, attempt: number) =>
    db.dataSource.query(`UPDATE operations SET status = $2, attempt = $3 WHERE id = $1`, [id, status, attempt]);

  const statuses = Object.values(OperationStatus);
  it.each(statuses.flatMap((status) => [0, 1].map((attempt) => [status, attempt] as const)))(
    'an operation %s at attempt %s blocks a new one naming its reference exactly as blocksResend says',
    async (status, attempt) => {
      const ref = `ref-${randomUUID()}`;
      const first = op(ref);
      expect((await insert([first])).written).toHaveProperty('createdAt');
      await place(first.id, status, attempt);
      const again = await insert([op(null, 'sandbox.sms', 0), op(ref, 'sandbox.sms', 1)]);
      const [{ n }] = (await db.dataSource.query(`SELECT count(*)::int AS n FROM executions WHERE id = $1`, [
        again.id,
      ])) as { n: number }[];
      if (blocksResend({ status, attempt })) {
        expect(again.written).toEqual({
          unsettled: { operationId: first.id, executionId: expect.any(String), key: 'k0', status, position: 1 },
        });
        expect(n).toBe(0);
      } else {
        expect(again.written).toHaveProperty('createdAt');
        expect(n).toBe(1);
      }
    },
  );

  it('another reference, another connector or another tenant is not held back', async () => {
    const ref = `ref-${randomUUID()}`;
    const first = op(ref);
    await insert([first]);
    await place(first.id, OperationStatus.UNKNOWN, 1);
    expect((await insert([op(`${ref}-2`)])).written).toHaveProperty('createdAt');
    expect((await insert([op(ref, 'http')])).written).toHaveProperty('createdAt');
    expect((await insert([op(ref)], 'other')).written).toHaveProperty('createdAt');
    expect((await insert([op(ref)])).written).toHaveProperty('unsettled');
  });

  it('looks up only the references it is given, not every unsettled operation of the tenant', async () => {
    // 200 of the tenant's operations on the connector, sent and unsettled, under references nobody submits again.
    const held = `held-${randomUUID()}`;
    for (let batch = 0; batch < 4; batch += 1) {
      await insert(
        Array.from({ length: 50 }, (_, position) => op(`${held}-${batch}-${position}`, 'sandbox.sms', position)),
      );
    }
    await db.dataSource.query(
      `UPDATE operations SET status = 'UNKNOWN', attempt = 1 WHERE tenant_id = $1 AND resend_ref LIKE $2`,
      [tenantId, `${held}-%`],
    );
    const runner = db.dataSource.createQueryRunner();
    await runner.connect();
    try {
      // Past its fifth execution on a connection Postgres runs the statement's generic plan: what the API's pooled
      // connections run all day.
      for (let i = 0; i < 6; i += 1) await insert([op(`fresh-${randomUUID()}`)], tenantId, runner.manager);
      // The connection's counts not yet in the shared statistics go there now: what follows counts this statement only.
      await runner.query(`SELECT pg_stat_force_next_flush()`);
      await runner.startTransaction();
      expect((await insert([op(`fresh-${randomUUID()}`)], tenantId, runner.manager)).written).toHaveProperty(
        'createdAt',
      );
      // This connection's reads of the table since the flush (no other session adds to them).
      const [read] = (await runner.query(
        `SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) AS n FROM pg_stat_xact_user_tables
         WHERE relname = 'operations'`,
      )) as { n: string }[];
      expect(Number(read.n)).toBe(0);
    } finally {
      if (runner.isTransactionActive) await runner.rollbackTransaction();
      await runner.release();
    }
  });
});
