import { chargeOperation, insertTestExecution } from '../../../test/support/fixtures';
import { useTestDatabase } from '../../../test/support/test-database';
import { DENIAL_LIMIT } from '@verity/status-model';
import { EARLIER_ATTEMPTS_SHOWN, INTAKE_SQL, RETRY_CHAIN_DEPTH, refutedRetries, retryChainsOf } from './store';

/**
 * What a page of long chains of retries costs `retryChainsOf` (INTAKE_SQL.retryChains), measured on seeded rows with
 * EXPLAIN ANALYZE: a page of the largest size a list answers (200 executions, each a retry at the end of a chain longer
 * than the walk) and one chain of 10,000 links (rows no API makes now: older data, or a hand-written link). The walk is
 * bounded per operation asked by RETRY_CHAIN_DEPTH, whatever the chains' length, and answers only the rows shown.
 */
describe('retryChainsOf on a page of long chains (real Postgres, EXPLAIN ANALYZE)', () => {
  const db = useTestDatabase('red24chaincost', ['acme']);
  const PAGE = 200;
  const LONG = 10_000;
  let template: string;

  /**
   * `count` chains of `links` operations (`prefix`-c-l), each the retry of the one before, every tenth denied, each in
   * an execution of its own (as a retry is): one statement per table, copies of one operation inserted as intake does.
   */
  async function seedChains(prefix: string, count: number, links: number): Promise<string[]> {
    // The links are inserted in order, each after the one it retries: the foreign keys' checks (one trigger per row)
    // are skipped for the seed's own transaction only, so the seed takes seconds on a loaded machine, not minutes.
    await db.dataSource.transaction(async (tx) => {
      await tx.query(`SET LOCAL session_replication_role = replica`);
      await tx.query(
        `INSERT INTO executions SELECT (jsonb_populate_record(NULL::executions, to_jsonb(t)
         || jsonb_build_object('id', 'exe_' || $2 || '_' || c || '_' || l, 'idempotency_key', NULL))).*
       FROM executions t, generate_series(1, $3::int) c, generate_series(1, $4::int) l
       WHERE t.id = (SELECT execution_id FROM operations WHERE id = $1)`,
        [template, prefix, count, links],
      );
      await tx.query(
        `INSERT INTO operations SELECT (jsonb_populate_record(NULL::operations, to_jsonb(t) || jsonb_build_object(
           'id', 'op_' || $2 || '_' || c || '_' || l,
           'execution_id', 'exe_' || $2 || '_' || c || '_' || l,
           'retry_of', CASE WHEN l > 1 THEN 'op_' || $2 || '_' || c || '_' || (l - 1) END,
           'status', 'CANCELLED',
           'terminal_reason', CASE WHEN l % 10 = 0 THEN 'DENIED' END,
           'approval', CASE WHEN l % 10 = 0 THEN jsonb_build_object('state', 'denied', 'decided_by', 'key_r',
             'decided_at', '2026-12-07T10:00:00.000Z', 'reason', repeat('x', 2000)) END))).*
       FROM operations t, generate_series(1, $3::int) c, generate_series(1, $4::int) l
       WHERE t.id = $1
       ORDER BY c, l`,
        [template, prefix, count, links],
      );
    });
    await db.dataSource.query('ANALYZE operations');
    return Array.from({ length: count }, (_, c) => `op_${prefix}_${c + 1}_${links}`);
  }

  /** The plan of the statement for `ids`, run: its walk's rows (the recursive CTE's), the rows answered, the time. */
  async function analyze(
    ids: string[],
    sql: string = INTAKE_SQL.retryChains,
    params: unknown[] = [RETRY_CHAIN_DEPTH],
  ): Promise<{ walked: number; answered: number; ms: number }> {
    const [{ 'QUERY PLAN': plans }] = (await db.dataSource.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${sql}`, [
      'acme',
      ids,
      ...params,
    ])) as { 'QUERY PLAN': { Plan: PlanNode; 'Execution Time': number }[] }[];
    const [plan] = plans;
    const nodes: PlanNode[] = [];
    const visit = (node: PlanNode) => {
      nodes.push(node);
      (node.Plans ?? []).forEach(visit);
    };
    visit(plan.Plan);
    // Every recursive walk of the statement, each run as often as it was.
    const recursive = nodes.filter((node) => node['Node Type'] === 'Recursive Union');
    return {
      walked: recursive.reduce((sum, node) => sum + node['Actual Rows'] * node['Actual Loops'], 0),
      answered: plan.Plan['Actual Rows'],
      ms: plan['Execution Time'],
    };
  }

  let long: string[];

  beforeAll(async () => {
    const op = chargeOperation();
    await insertTestExecution(db.dataSource.manager, 'acme', { operations: [op] });
    template = op.id;
    const [end] = await seedChains('long', 1, LONG);
    long = Array.from({ length: LONG }, (_, l) => end.replace(/_\d+$/, `_${l + 1}`));
  }, 180_000);

  it('walks a page of the 200 latest retries of a chain of 10,000 links at most RETRY_CHAIN_DEPTH + 1 links each', async () => {
    // The executions list's largest page: the 200 latest executions, each a retry of the one before.
    const page = long.slice(-PAGE);
    const cost = await analyze(page);
    expect(cost.walked).toBeLessThanOrEqual(PAGE * (RETRY_CHAIN_DEPTH + 1));
    expect(cost.answered).toBeLessThanOrEqual(PAGE * (EARLIER_ATTEMPTS_SHOWN + 1 + DENIAL_LIMIT));
    const chains = await retryChainsOf(
      db.dataSource.manager,
      'acme',
      page.map((id) => ({ id, retryOf: 'linked', approval: null })),
    );
    expect(chains.size).toBe(PAGE);
    // Denied: every tenth link; each retry's walk (it and RETRY_CHAIN_DEPTH back) holds 10 or 11 of them.
    for (const [id, chain] of chains) {
      const l = long.indexOf(id) + 1;
      const denied = Array.from({ length: RETRY_CHAIN_DEPTH + 1 }, (_, d) => l - d).filter((k) => k % 10 === 0);
      expect(chain).toMatchObject({ uncounted: true, denials: denied.length });
      expect(chain.earlier.length).toBeLessThanOrEqual(EARLIER_ATTEMPTS_SHOWN + DENIAL_LIMIT);
      // Every attempt listed is up its own chain, within the walk.
      for (const attempt of chain.earlier) {
        const k = long.indexOf(attempt.operationId) + 1;
        expect(k).toBeGreaterThanOrEqual(l - RETRY_CHAIN_DEPTH);
        expect(k).toBeLessThan(l);
      }
    }
    process.stdout.write(`red24 page of ${PAGE} retries of a chain of ${LONG}: ${JSON.stringify(cost)}\n`);
  });

  it('walks a chain of 10,000 links no further than RETRY_CHAIN_DEPTH back, from its end and from its middle', async () => {
    const cost = await analyze([long[LONG - 1], long[LONG / 2]]);
    expect(cost.walked).toBeLessThanOrEqual(2 * (RETRY_CHAIN_DEPTH + 1));
    process.stdout.write(`red24 chain of ${LONG}: ${JSON.stringify(cost)}\n`);
  });

  it('tells which of a page of 200 retries of a chain of 10,000 links were made on a refuted FAILED, walking each link once', async () => {
    // A FAILED up the chain, inside the page, whose provider's 2xx came back late: the retries after it rest on its word.
    const refuted = LONG - 95;
    await db.dataSource.query(`UPDATE operations SET status = 'FAILED', acknowledged_at = now() WHERE id = $1`, [
      long[refuted - 1],
    ]);
    const page = long.slice(-PAGE);
    const cost = await analyze(page, INTAKE_SQL.refutedRetries, []);
    // The page's chains overlap: walked once each, not once per retry of the page (200 × 10,000 rows, seconds).
    expect(cost.walked).toBeLessThanOrEqual(2 * LONG);
    // The retries after it, not it itself (its own retry_of is no refuted FAILED), nor those before it.
    expect([...(await refutedRetries(db.dataSource.manager, 'acme', page))].sort()).toEqual(long.slice(refuted).sort());
    process.stdout.write(`red24 refutedRetries, page of ${PAGE} of a chain of ${LONG}: ${JSON.stringify(cost)}\n`);
  });
  it('walks a chain of 10,000 links locked, as a send of its last retry judges it, returning every link in order', async () => {
    // verity_retry_chain_locked (the send guard's and a locked version's walk) kept every id it had seen in an array it
    // searched and copied at each link: 10,000 links took 2.6–3.7 s on this machine, with every link share-locked all
    // along; the linear walk takes ~0.2 s (docs/decisions.md). Time is not asserted here (a loaded machine varies more
    // than that); what is asserted is the walk's answer.
    const walked = (await db.dataSource.query(`SELECT id FROM verity_retry_chain_locked($1, 'acme')`, [
      long[LONG - 1],
    ])) as { id: string }[];
    expect(walked.map((link) => link.id)).toEqual([...long].reverse());
  });

  it('ends a locked walk of a chain that loops (no API makes one) having returned each of its links', async () => {
    const ids = await seedChains('loop', 1, 5).then(([end]) => end.replace(/_\d+$/, ''));
    const loop = Array.from({ length: 5 }, (_, l) => `${ids}_${l + 1}`);
    // The first link made the retry of the last: 1 → 5 → 4 → 3 → 2 → 1 → …
    await db.dataSource.query(`UPDATE operations SET retry_of = $2 WHERE id = $1`, [loop[0], loop[4]]);
    const walked = (await db.dataSource.query(`SELECT id FROM verity_retry_chain_locked($1, 'acme')`, [loop[4]])) as {
      id: string;
    }[];
    expect(new Set(walked.map((link) => link.id))).toEqual(new Set(loop));
    expect(walked.length).toBeLessThanOrEqual(4 * loop.length);
  });
});

interface PlanNode {
  'Node Type': string;
  'Actual Rows': number;
  'Actual Loops': number;
  Plans?: PlanNode[];
}
