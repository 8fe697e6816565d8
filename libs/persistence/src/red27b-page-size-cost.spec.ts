import { chargeOperation, insertTestExecution } from '../../../test/support/fixtures';
import { useTestDatabase } from '../../../test/support/test-database';
import { ADMIN_CHANGES_SQL } from './admin-changes';
import { REVIEW_QUEUE_SQL } from './review-queue.repository';
import { READ_SQL, withColumns } from './store';

/**
 * What the statements that size a list page before reading it cost, measured on seeded rows with EXPLAIN ANALYZE: a
 * tenant with many executions and operations, its approval queue long. Each sizes only the rows of the page asked
 * (at most 201), through indexes, never every operation of the tenant or of the queue.
 */
describe('the page-size statements on a tenant with many operations (real Postgres, EXPLAIN ANALYZE)', () => {
  const db = useTestDatabase('red27bsizecost', ['acme']);
  const EXECUTIONS = 4_000;
  const OPS_EACH = 5;
  const EVENTS = 20_000;
  let template: string;

  beforeAll(async () => {
    const op = chargeOperation();
    await insertTestExecution(db.dataSource.manager, 'acme', { operations: [op] });
    template = op.id;
    await db.dataSource.transaction(async (tx) => {
      await tx.query(`SET LOCAL session_replication_role = replica`);
      await tx.query(
        `INSERT INTO executions SELECT (jsonb_populate_record(NULL::executions, to_jsonb(t)
           || jsonb_build_object('id', 'exe_seed' || lpad(n::text, 6, '0'), 'idempotency_key', NULL,
                                 'deadline_at', now() + interval '1 day'))).*
         FROM executions t, generate_series(1, $2::int) n
         WHERE t.id = (SELECT execution_id FROM operations WHERE id = $1)`,
        [template, EXECUTIONS],
      );
      // Every operation waits for approval and carries 20 KB of params: the queue is the whole table.
      await tx.query(
        `INSERT INTO operations SELECT (jsonb_populate_record(NULL::operations, to_jsonb(t) || jsonb_build_object(
           'id', 'op_seed' || lpad(n::text, 6, '0') || '_' || k,
           'execution_id', 'exe_seed' || lpad(n::text, 6, '0'),
           'key', 'k' || k, 'position', k,
           'status', 'PREPARED',
           'approval', jsonb_build_object('state', 'requested'),
           'params', jsonb_build_object('note', repeat(md5(n::text || k::text), 625))))).*
         FROM operations t, generate_series(1, $2::int) n, generate_series(1, $3::int) k
         WHERE t.id = $1`,
        [template, EXECUTIONS, OPS_EACH],
      );
    });
    // 20,000 events of 2 KB on the template's execution: its events list is long.
    await db.dataSource.transaction(async (tx) => {
      await tx.query(`SET LOCAL session_replication_role = replica`);
      await tx.query(
        `INSERT INTO events SELECT (jsonb_populate_record(NULL::events, to_jsonb(t) || jsonb_build_object(
           'id', 'evt_seed' || lpad(n::text, 6, '0'), 'seq', t.seq + n,
           'data', jsonb_build_object('note', repeat(md5(n::text), 64))))).*
         FROM (SELECT * FROM events WHERE execution_id = (SELECT execution_id FROM operations WHERE id = $1)
               ORDER BY seq DESC LIMIT 1) t, generate_series(1, $2::int) n`,
        [template, EVENTS],
      );
    });
    await db.dataSource.query('ANALYZE events');
    await db.dataSource.query('ANALYZE executions');
    await db.dataSource.query('ANALYZE operations');
  }, 300_000);

  async function plan(
    sql: string,
    params: unknown[],
  ): Promise<{ rowsRead: number; rowsSized: number; seqScans: string[] }> {
    const [{ 'QUERY PLAN': plans }] = (await db.dataSource.query(
      `EXPLAIN (ANALYZE, VERBOSE, FORMAT JSON) ${withColumns(db.dataSource.manager, sql)}`,
      params,
    )) as {
      'QUERY PLAN': { Plan: PlanNode }[];
    }[];
    const nodes: PlanNode[] = [];
    const visit = (node: PlanNode) => {
      nodes.push(node);
      (node.Plans ?? []).forEach(visit);
    };
    visit(plans[0].Plan);
    const scans = nodes.filter((node) => /Scan/.test(node['Node Type']));
    return {
      rowsRead: scans.reduce((sum, node) => sum + node['Actual Rows'] * node['Actual Loops'], 0),
      seqScans: scans.filter((node) => node['Node Type'] === 'Seq Scan').map((node) => node['Relation Name'] ?? ''),
      // The rows whose stored text was rendered to be measured (the node that computes it, and any above it).
      rowsSized: Math.max(
        0,
        ...nodes
          .filter((node) => (node.Output ?? []).some((column) => column.includes('octet_length')))
          .map((node) => node['Actual Rows'] * node['Actual Loops']),
      ),
    };
  }

  it('sizes a page of 200 executions with their operations, the page read, sized and cut in one statement', async () => {
    const cost = await plan(READ_SQL.listExecutions, ['acme', 201, [], 1024 * 1024]);
    expect(cost.rowsRead).toBeLessThanOrEqual(201 * (1 + OPS_EACH) + 10);
    expect(cost.rowsSized).toBeLessThanOrEqual(201 * OPS_EACH);
  });

  it('sizes the 201 newest operations of a long approval queue, not the whole queue', async () => {
    const cost = await plan(REVIEW_QUEUE_SQL.page, [
      'acme',
      'approvals',
      null,
      null,
      null,
      null,
      null,
      null,
      201,
      1024 * 1024,
    ]);
    // The queue is all 20,000 operations: it is filtered as before, but only the page's are rendered as text.
    expect(cost.rowsSized).toBeLessThanOrEqual(201);
  });

  it('sizes a page of admin changes through its index', async () => {
    const cost = await plan(ADMIN_CHANGES_SQL.page, ['acme', null, null, null, 201, 1024 * 1024]);
    expect(cost.rowsSized).toBeLessThanOrEqual(201);
    expect(cost.seqScans).toEqual([]);
  });

  it('sizes a page of events after the limit, through the (execution_id, seq) index', async () => {
    const cost = await plan(READ_SQL.eventsWithinBytes, [
      (await db.dataSource.query(`SELECT execution_id FROM operations WHERE id = $1`, [template]))[0].execution_id,
      0,
      11,
      'acme',
      1024 * 1024,
    ]);
    expect(cost.rowsSized).toBeLessThanOrEqual(11);
    expect(cost.seqScans).toEqual([]);
  });
});

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Actual Rows': number;
  'Actual Loops': number;
  Output?: string[];
  Plans?: PlanNode[];
}
