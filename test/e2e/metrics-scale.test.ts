import { METRICS_SQL } from '@verity/persistence';
import { Client } from 'pg';
import { insertChargeExecution } from '../support/fixtures';
import { metricValue } from '../support/exposition';
import { http } from '../support/http';
import { METRICS_TOKEN, Stack, waitFor } from '../support/stack';

const HISTORY_EXECUTIONS = 1_000;
const EVENTS = 1_000_000;
const TIMING = process.env.METRICS_SCALE_TIMING === '1';

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Shared Hit Blocks': number;
  'Shared Read Blocks': number;
  Plans?: PlanNode[];
}

function nodes(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(nodes)];
}

/**
 * Issue 13: /metrics costs what is in flight, never what is in the log. With a million events in the table, the real
 * API's scrape answers correctly while another session holds an ACCESS EXCLUSIVE lock on events (any statement that
 * so much as planned a read of events would queue behind it), and each statement the scrape runs touches exactly as
 * many pages as it did before the million were written. No clock is asserted: the wall time at this size is recorded
 * in docs/benchmarks.md (METRICS_SCALE_TIMING=1 prints it).
 */
describe('/metrics with a million events', () => {
  let stack: Stack;

  beforeAll(async () => {
    // The API alone: nothing else writes while the statements are measured.
    stack = await Stack.start({ label: 'metricsscale', dispatchers: 0, reconcilers: 0 });
  });
  afterAll(async () => stack?.stop());

  const query = <T>(sql: string, params?: unknown[]) => stack.db.dataSource.query(sql, params) as Promise<T[]>;

  /** Pages each scrape statement touched (shared buffers hit + read, every plan node), and the relations planned. */
  async function scrapeStatementCosts(): Promise<{ pages: Record<string, number>; relations: string[] }> {
    const pages: Record<string, number> = {};
    const relations = new Set<string>();
    for (const [name, sql] of Object.entries(METRICS_SQL)) {
      const [{ 'QUERY PLAN': plan }] = await query<{ 'QUERY PLAN': { Plan: PlanNode }[] }>(
        `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${sql}`,
      );
      const root = plan[0].Plan;
      // A node's buffer counts include its children's: the root's are the statement's.
      pages[name] = root['Shared Hit Blocks'] + root['Shared Read Blocks'];
      for (const node of nodes(root)) if (node['Relation Name']) relations.add(node['Relation Name']);
    }
    return { pages, relations: [...relations].sort() };
  }

  /** The scrape's wall time, for docs/benchmarks.md only (METRICS_SCALE_TIMING=1): never asserted. */
  async function timedScrapes(): Promise<string> {
    const times: number[] = [];
    for (let i = 0; i < 50; i += 1) {
      const started = process.hrtime.bigint();
      await scrape();
      times.push(Number(process.hrtime.bigint() - started) / 1e6);
    }
    times.sort((a, b) => a - b);
    return `p50 ${times[25].toFixed(2)} ms, p95 ${times[47].toFixed(2)} ms (50 scrapes)`;
  }

  async function scrape(): Promise<string> {
    const res = await http<string>(stack.apiUrl, 'GET', '/metrics', { key: METRICS_TOKEN });
    expect(res.status).toBe(200);
    return res.text;
  }

  it('answers correctly, never touches events, and reads the same pages with 1M events as with none', async () => {
    // History: settled executions with their VERIFIED operations (what a million events would belong to).
    await query(
      `INSERT INTO executions (id, tenant_id, agent_id, intent, status, deadline_at, event_seq)
       SELECT 'exe_hist' || lpad(g::text, 4, '0'), 'demo', 'history', 'history', 'completed', now(), 1000
       FROM generate_series(1, $1::int) g`,
      [HISTORY_EXECUTIONS],
    );
    await query(
      `INSERT INTO operations (id, execution_id, tenant_id, key, position, connector, action, params, status)
       SELECT 'op_hist' || lpad(g::text, 4, '0'), 'exe_hist' || lpad(g::text, 4, '0'), 'demo', 'charge', 0,
              'sandbox.payments', 'charge', '{}', 'VERIFIED'
       FROM generate_series(1, $1::int) g`,
      [HISTORY_EXECUTIONS],
    );
    // In flight: what the gauges must show.
    const inFlight: [string, string, string | null][] = [
      ['running', 'SENT', null],
      ['running', 'SENT', null],
      ['running', 'ACKNOWLEDGED', null],
      ['running', 'MANUAL_REVIEW', `{"due_at": "${new Date(Date.now() - 2 * 3600_000).toISOString()}"}`],
      ['created', 'PREPARED', null],
    ];
    for (const [executionStatus, operationStatus, obligation] of inFlight) {
      const { executionId, operationId } = await insertChargeExecution(stack.db.dataSource.manager, 'demo');
      await query(`UPDATE executions SET status = $2 WHERE id = $1`, [executionId, executionStatus]);
      await query(`UPDATE operations SET status = $2, obligation = $3::jsonb WHERE id = $1`, [
        operationId,
        operationStatus,
        obligation,
      ]);
    }
    // Vacuumed, so what the measured reads find (dead versions of the updates above, hint bits) is settled.
    await query(`VACUUM (ANALYZE) executions, operations`);
    const before = await scrapeStatementCosts();
    const timedBefore = TIMING ? await timedScrapes() : '';

    // A million events in one statement. Ids ascend so each index grows at its right edge (a bulk load, fast);
    // session_replication_role skips the per-row foreign-key trigger, the rows being consistent by construction.
    await stack.db.dataSource.transaction(async (tx) => {
      await tx.query(`SET LOCAL session_replication_role = replica`);
      await tx.query(
        `INSERT INTO events (id, execution_id, tenant_id, seq, type, from_status, to_status)
         SELECT 'evt_hist' || lpad(g::text, 7, '0'), 'exe_hist' || lpad((g / 1000 + 1)::text, 4, '0'), 'demo',
                g % 1000 + 1, 'execution.status_changed', 'running', 'validating_output'
         FROM generate_series(0, $1::int - 1) g`,
        [EVENTS],
      );
    });
    // Analysed (and vacuumed, so autovacuum does not queue for the lock below) as a live table of this size would be.
    await query(`VACUUM (ANALYZE) events`);
    const [{ n }] = await query<{ n: number }>(`SELECT count(*)::int AS n FROM events`);
    expect(n).toBeGreaterThanOrEqual(EVENTS);

    const after = await scrapeStatementCosts();
    expect(after.relations).not.toContain('events');
    expect(after.relations).toEqual(before.relations);
    expect(after.pages).toEqual(before.pages);

    // The real scrape, with events locked against everyone: it answers, and no session of the API ever waits for
    // events (if one did, the lock's waiter shows in pg_locks and the test fails at once instead of hanging).
    const holder = new Client({ connectionString: stack.db.url });
    await holder.connect();
    let text = '';
    try {
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE events IN ACCESS EXCLUSIVE MODE');
      const waiters = () =>
        query<{ n: number }>(
          // This database's only: every test database is a copy of one template, so the events table of another test
          // file running beside this one has the same oid, and its waiters would be counted as the API's.
          `SELECT count(*)::int AS n FROM pg_locks WHERE relation = 'events'::regclass AND NOT granted
              AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
        ).then(([row]) => row.n);
      let answered = false;
      const scraped = scrape().then((body) => {
        answered = true;
        text = body;
        return 'answered';
      });
      const blocked = waitFor(waiters, (w) => w > 0 || answered, 20_000, 20).then((w) =>
        w > 0 ? 'waited for events' : 'answered',
      );
      expect(await Promise.race([scraped, blocked])).toBe('answered');
      await scraped;
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      await holder.end();
    }

    expect(metricValue(text, 'verity_executions_in_flight', { status: 'running' })).toBe(4);
    expect(metricValue(text, 'verity_executions_in_flight', { status: 'created' })).toBe(1);
    expect(metricValue(text, 'verity_executions_in_flight')).toBe(5);
    expect(metricValue(text, 'verity_operations_in_flight', { status: 'SENT' })).toBe(2);
    expect(metricValue(text, 'verity_operations_in_flight', { status: 'ACKNOWLEDGED' })).toBe(1);
    expect(metricValue(text, 'verity_operations_in_flight', { status: 'MANUAL_REVIEW' })).toBe(1);
    expect(metricValue(text, 'verity_operations_in_flight', { status: 'PREPARED' })).toBe(1);
    expect(metricValue(text, 'verity_operations_in_flight')).toBe(5);
    expect(metricValue(text, 'verity_open_obligations', { age: 'overdue_1h_to_24h' })).toBe(1);
    expect(metricValue(text, 'verity_overdue_obligations')).toBe(1);

    if (TIMING) {
      const started = process.hrtime.bigint();
      await query(`SELECT type, count(*) FROM events GROUP BY type`);
      const groupBy = Number(process.hrtime.bigint() - started) / 1e6;
      console.log(
        `/metrics with no events: ${timedBefore}; at ${n} events: ${await timedScrapes()}; ` +
          `the old count(*) GROUP BY over events: ${groupBy.toFixed(0)} ms`,
      );
    }
  });
});
