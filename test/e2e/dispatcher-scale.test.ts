import { Stack, waitFor } from '../support/stack';
import { charge, sms, unique } from '../support/http';
import { Event, expectLegalHistory, submit } from './dispatcher-helpers';

/**
 * Issue 4, I3 and I12 under scale-out: three dispatcher processes share 500 operations (with a sprinkle of ambiguous
 * provider answers); every operation is processed, none is sent twice, and no effect exists twice at the provider.
 */
describe('dispatcher: three processes, 500 operations', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'dscale', dispatchers: 3, reconcilers: 1 });
  });
  afterAll(async () => stack?.stop());

  it('0 duplicates, 0 operations left unprocessed', async () => {
    await stack.setFaults({
      rules: [
        { method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', probability: 0.03 },
        { method: 'POST', path: '/v1/charges', fault: 'reset_after_commit', probability: 0.03 },
        { method: 'POST', path: '/v1/charges', fault: 'error_after_commit', probability: 0.03 },
      ],
    });
    const executions = 100;
    const references: string[] = [];
    const clientRefs: string[] = [];
    const ids: string[] = [];
    const batch = async (from: number, to: number) => {
      for (let i = from; i < to; i += 1) {
        const refs = [0, 1, 2, 3].map((k) => unique(`scale-${i}-${k}`));
        const clientRef = unique(`scale-sms-${i}`);
        references.push(...refs);
        clientRefs.push(clientRef);
        const created = await submit(stack, [
          ...refs.map((r, k) => charge(r, { key: `c${k}` })),
          sms(clientRef, { depends_on: ['c0'] }),
        ]);
        ids.push(created.id);
      }
    };
    await Promise.all([0, 1, 2, 3, 4].map((w) => batch(w * 20, w * 20 + 20)));
    expect(ids.length).toBe(executions);

    const db = stack.db.dataSource;
    await waitFor(
      async () =>
        (await db.query(
          `SELECT count(*)::int AS n FROM executions WHERE status NOT IN ('completed','failed','cancelled','expired')`,
        )) as { n: number }[],
      (r) => r[0].n === 0,
      120_000,
      500,
    );
    const statuses = (await db.query(
      `SELECT connector, status, count(*)::int AS n FROM operations GROUP BY 1, 2 ORDER BY 1, 2`,
    )) as { connector: string; status: string; n: number }[];
    // Every charge is settled from the source (ambiguous answers reconciled), every SMS acknowledged. (Anything else
    // is shown with its history, so a failure here explains itself.)
    const unexpected = (await db.query(
      `SELECT o.id, o.status, o.terminal_reason, o.evidence,
              (SELECT json_agg(json_build_object('to', e.to_status, 'type', e.type, 'data', e.data, 'at', e.created_at)
                               ORDER BY e.seq)
               FROM events e WHERE e.operation_id = o.id) AS history
       FROM operations o
       WHERE NOT ((o.connector = 'sandbox.payments' AND o.status = 'VERIFIED')
               OR (o.connector = 'sandbox.sms' AND o.status = 'ACKNOWLEDGED'))
       LIMIT 3`,
    )) as unknown[];
    expect(unexpected).toEqual([]);
    expect(statuses).toEqual([
      { connector: 'sandbox.payments', status: 'VERIFIED', n: 400 },
      { connector: 'sandbox.sms', status: 'ACKNOWLEDGED', n: 100 },
    ]);
    const sentTwice = (await db.query(
      `SELECT operation_id FROM events WHERE to_status = 'SENT' GROUP BY 1 HAVING count(*) > 1`,
    )) as unknown[];
    expect(sentTwice).toEqual([]);
    const attempts = (await db.query(`SELECT max(attempt)::int AS max FROM operations`)) as { max: number }[];
    expect(attempts[0].max).toBe(1);

    const effects = await stack.effects();
    expect(effects.duplicates).toEqual([]);
    for (const r of references) expect(effects.charges[r]?.count).toBe(1);
    for (const c of clientRefs) expect(effects.messages[c]?.count).toBe(1);

    const log = (await db.query(
      `SELECT id, seq::int AS seq, type, operation_id, from_status, to_status, data, execution_id
       FROM events ORDER BY execution_id, seq`,
    )) as (Event & { execution_id: string })[];
    const byExecution = new Map<string, Event[]>();
    for (const e of log) byExecution.set(e.execution_id, [...(byExecution.get(e.execution_id) ?? []), e]);
    expect(byExecution.size).toBe(executions);
    for (const history of byExecution.values()) expectLegalHistory(history);
    expect(stack.running('dispatcher').length).toBe(3);
  });
});
