import { Stack, waitFor } from '../support/stack';
import { charge, sms, unique } from '../support/http';
import { Event, expectLegalHistory, submit } from './dispatcher-helpers';

/**
 * I3 and I12 under scale-out: three dispatcher processes share 500 operations (with a sprinkle of ambiguous
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
    // Every operation settled, and what Verity claims matches the provider's ground truth: VERIFIED and ACKNOWLEDGED
    // have exactly one effect, FAILED none, MANUAL_REVIEW at most one (the machine is loaded: a real timeout of the
    // sandbox is an honest UNKNOWN too, and an SMS cannot be read back). Anything else is shown with its history.
    const effects = await stack.effects();
    const ops = (await db.query(
      `SELECT o.id, o.connector, o.status, o.params, o.terminal_reason,
              (SELECT json_agg(json_build_object('to', e.to_status, 'type', e.type, 'data', e.data) ORDER BY e.seq)
               FROM events e WHERE e.operation_id = o.id) AS history
       FROM operations o`,
    )) as { id: string; connector: string; status: string; params: Record<string, string>; history: unknown }[];
    expect(ops.length).toBe(500);
    const inconsistent = ops.filter((o) => {
      const count =
        o.connector === 'sandbox.payments'
          ? (effects.charges[o.params.reference]?.count ?? 0)
          : (effects.messages[o.params.client_ref]?.count ?? 0);
      switch (o.status) {
        case 'VERIFIED':
        case 'ACKNOWLEDGED':
          return count !== 1;
        case 'FAILED':
          return count !== 0;
        case 'MANUAL_REVIEW':
          return count > 1;
        case 'CANCELLED':
          // Only a dependent of a charge that did not happen.
          return count !== 0;
        default:
          return true;
      }
    });
    expect(inconsistent.slice(0, 3)).toEqual([]);
    const verified = ops.filter((o) => o.status === 'VERIFIED').length;
    // Ambiguous answers are reconciled from the source: nearly every charge ends VERIFIED.
    expect(verified).toBeGreaterThan(380);
    const sentTwice = (await db.query(
      `SELECT operation_id FROM events WHERE to_status = 'SENT' GROUP BY 1 HAVING count(*) > 1`,
    )) as unknown[];
    expect(sentTwice).toEqual([]);
    const attempts = (await db.query(`SELECT max(attempt)::int AS max FROM operations`)) as { max: number }[];
    expect(attempts[0].max).toBe(1);

    expect(effects.duplicates).toEqual([]);
    for (const r of references) expect(effects.charges[r]?.count ?? 0).toBeLessThanOrEqual(1);
    for (const c of clientRefs) expect(effects.messages[c]?.count ?? 0).toBeLessThanOrEqual(1);

    const log = (await db.query(
      `SELECT id, seq::int AS seq, type, operation_id, from_status, to_status, data, execution_id
       FROM events ORDER BY execution_id, seq`,
    )) as (Event & { execution_id: string })[];
    const byExecution = new Map<string, Event[]>();
    for (const e of log) byExecution.set(e.execution_id, [...(byExecution.get(e.execution_id) ?? []), e]);
    expect(byExecution.size).toBe(executions);
    for (const history of byExecution.values()) expectLegalHistory(history);
    expect(stack.running('dispatcher').length).toBe(3);
    // Thousands of provider calls over pooled keep-alive sockets: no listener piles up on a socket.
    expect(stack.warnings().filter((w) => w.includes('MaxListenersExceededWarning'))).toEqual([]);
  });
});
