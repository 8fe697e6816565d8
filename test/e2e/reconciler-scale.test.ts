import { Stack, waitFor } from '../support/stack';
import { charge, unique } from '../support/http';
import { Event, expectLegalHistory, submit } from './dispatcher-helpers';

/**
 * Verification and reconciliation under load, with two reconciler processes: a replica lag shorter than the settle window never yields a
 * false "did not happen" (0 FAILED over 200 operations, half of them UNKNOWN after a timeout); no operation is
 * processed twice at once (every history is one legal chain); and one sweeper runs at a time (sweep_log intervals
 * never overlap, whichever process ran them).
 */
describe('reconciler: two processes, 200 operations behind a lagging replica', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'rscale', dispatchers: 2, reconcilers: 2 });
  });
  afterAll(async () => stack?.stop());

  it('0 false negatives, no double processing, one sweeper at a time', async () => {
    const lagMs = 1400;
    expect(lagMs).toBeLessThan(Number(stack.env.SETTLE_WINDOW_MS));
    await stack.setFaults({
      rules: [{ method: 'POST', path: '/v1/charges', fault: 'timeout_after_commit', probability: 0.5 }],
      replica_lag_ms: lagMs,
    });
    const references: string[] = [];
    const submitBatch = async (worker: number) => {
      for (let i = 0; i < 10; i += 1) {
        const refs = [0, 1, 2, 3, 4].map((k) => unique(`rs-${worker}-${i}-${k}`));
        references.push(...refs);
        await submit(
          stack,
          refs.map((r, k) => charge(r, { key: `c${k}` })),
        );
      }
    };
    await Promise.all([0, 1, 2, 3].map(submitBatch));
    expect(references.length).toBe(200);

    const db = stack.db.dataSource;
    await waitFor(
      async () =>
        (await db.query(
          `SELECT count(*)::int AS n FROM operations WHERE status NOT IN ('VERIFIED','FAILED','MANUAL_REVIEW','CANCELLED')`,
        )) as { n: number }[],
      (r) => r[0].n === 0,
      150_000,
      500,
    );
    const notVerified = (await db.query(
      `SELECT o.id, o.status, o.terminal_reason, o.evidence,
              (SELECT json_agg(json_build_object('to', e.to_status, 'data', e.data, 'at', e.created_at) ORDER BY e.seq)
               FROM events e WHERE e.operation_id = o.id) AS history
       FROM operations o WHERE o.status <> 'VERIFIED' LIMIT 3`,
    )) as unknown[];
    expect(notVerified).toEqual([]);
    const timedOut = (await db.query(
      `SELECT count(DISTINCT operation_id)::int AS n FROM events WHERE from_status = 'SENT' AND to_status = 'UNKNOWN'`,
    )) as { n: number }[];
    // The faults really did put a good share of the operations through reconciliation.
    expect(timedOut[0].n).toBeGreaterThan(50);

    const effects = await stack.effects();
    expect(effects.duplicates).toEqual([]);
    for (const r of references) expect(effects.charges[r]?.count).toBe(1);

    // No operation processed twice at once: every history is one chain (each RECONCILING left exactly once, no
    // transition written twice), whichever of the two reconcilers made each move.
    const log = (await db.query(
      `SELECT id, seq::int AS seq, type, operation_id, from_status, to_status, data, execution_id
       FROM events ORDER BY execution_id, seq`,
    )) as (Event & { execution_id: string })[];
    const byExecution = new Map<string, Event[]>();
    for (const e of log) byExecution.set(e.execution_id, [...(byExecution.get(e.execution_id) ?? []), e]);
    expect(byExecution.size).toBe(40);
    for (const history of byExecution.values()) expectLegalHistory(history);
    const entered = log.filter((e) => e.to_status === 'RECONCILING').length;
    const left = log.filter((e) => e.from_status === 'RECONCILING').length;
    expect(left).toBe(entered);

    // One sweeper at a time: no two sweeps' [started_at, finished_at] intervals overlap.
    const sweeps = (await db.query(
      `SELECT worker, started_at, finished_at FROM sweep_log WHERE finished_at IS NOT NULL ORDER BY started_at`,
    )) as { worker: string; started_at: Date; finished_at: Date }[];
    expect(sweeps.length).toBeGreaterThan(5);
    for (let i = 1; i < sweeps.length; i += 1) {
      expect(new Date(sweeps[i].started_at).getTime()).toBeGreaterThanOrEqual(
        new Date(sweeps[i - 1].finished_at).getTime(),
      );
    }
    expect(stack.running('reconciler').length).toBe(2);
  });
});
