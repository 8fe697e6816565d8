import { randomBytes } from 'node:crypto';
import { newId } from '@verity/platform';
import { useTestDatabase } from '../../../test/support/test-database';
import { chargeOperation, insertTestExecution } from '../../../test/support/fixtures';
import { writeConnectorSecret } from './connector-settings.repository';
import { ExecutionEntity } from './entities';
import {
  QUEUE_FILTER,
  REVIEW_QUEUE_SQL,
  ReviewQueue,
  ReviewQueueFilter,
  filterParams,
  reviewQueuePageWithSecretsHeld,
} from './review-queue.repository';
import { SecretsCipher } from './secrets-cipher';
import { rows } from './sql';
import {
  READ_SQL,
  findExecutionWithSecretsHeld,
  findOperationWithSecretsHeld,
  findOperationWithVersionAndSecretsHeld,
  listExecutionsWithSecretsHeld,
  selectEntities,
  withColumns,
} from './store';

/**
 * The reads an answer begins with tell, in the same statement, whether the tenant holds any secret (withSecretsHeld).
 * What they find must be exactly what the statements they replaced found — no phantom row for an empty page or a 404,
 * the same order, the same count — for a tenant with secrets and one without; and the probe is asked once per
 * statement, of the caller's tenant.
 */
describe('reads that tell whether the tenant holds any secret find what they found before (real Postgres)', () => {
  const db = useTestDatabase('secretsheld', ['acme', 'bare', 'elsewhere']);
  const cipher = new SecretsCipher(randomBytes(32).toString('base64'));
  const TAKING = ['http'];
  // The statements as they were before the probe was added.
  const OLD = {
    list: `SELECT {columns:Execution e} FROM executions e WHERE e.tenant_id = $1 ORDER BY e.id DESC LIMIT $2`,
    byStatus: `SELECT {columns:Execution e} FROM executions e
     WHERE e.tenant_id = $1 AND e.status = $3 ORDER BY e.id DESC LIMIT $2`,
    before: `SELECT {columns:Execution e} FROM executions e
     WHERE e.tenant_id = $1 AND e.id < $3 ORDER BY e.id DESC LIMIT $2`,
    byStatusBefore: `SELECT {columns:Execution e} FROM executions e
     WHERE e.tenant_id = $1 AND e.status = $3 AND e.id < $4 ORDER BY e.id DESC LIMIT $2`,
  };
  const STATUSES = ['created', 'running', 'completed', 'failed'];
  const executions: Record<string, string[]> = { acme: [], bare: [], elsewhere: [] };
  const operations: Record<string, string[]> = { acme: [], bare: [], elsewhere: [] };

  beforeAll(async () => {
    const m = db.dataSource.manager;
    // acme holds a secret of a connector that takes them; elsewhere only one of a connector not asked for; bare none.
    await writeConnectorSecret(m, cipher, 'acme', 'http', 'crm_token', 'crm-token-value', 't');
    await writeConnectorSecret(m, cipher, 'elsewhere', 'sandbox.sms', 'sms_token', 'sms-token-value', 't');
    for (const tenant of ['acme', 'bare', 'elsewhere']) {
      for (let i = 0; i < 9; i += 1) {
        const op = chargeOperation({ connector: i % 2 ? 'http' : 'sandbox.payments', key: `k${i}` });
        const id = await insertTestExecution(m, tenant, { execution: { id: newId('exe') }, operations: [op] });
        executions[tenant].push(id);
        operations[tenant].push(op.id);
        await m.query(`UPDATE executions SET status = $2 WHERE id = $1`, [id, STATUSES[i % STATUSES.length]]);
        // Three queues' worth: approvals waiting, held (escalated or not, of two reasons), and neither.
        if (i % 3 === 0) {
          await m.query(
            `UPDATE operations SET status = 'PREPARED', approval = jsonb_build_object('state', 'requested') WHERE id = $1`,
            [op.id],
          );
        } else if (i % 3 === 1) {
          await m.query(
            `UPDATE operations SET status = 'MANUAL_REVIEW', obligation = jsonb_build_object('reason', $2::text,
               'escalated_at', CASE WHEN $3 THEN now()::text END) WHERE id = $1`,
            [op.id, i % 2 ? 'unreachable' : 'ambiguous', i > 4],
          );
        }
      }
    }
  });

  const holds = { acme: true, bare: false, elsewhere: false } as const;

  it('a page of executions: every filter, cursor and limit finds the same rows in the same order as before', async () => {
    const m = db.dataSource.manager;
    let cases = 0;
    for (const tenant of ['acme', 'bare', 'elsewhere', 'nobody'] as const) {
      const ids = executions[tenant] ?? [];
      const cursors = [undefined, 'exe_', 'exe_~', ...ids];
      for (const status of [undefined, ...STATUSES, 'expired']) {
        for (const before of cursors) {
          for (const limit of [1, 2, 3, 9, 10, 201]) {
            const sql = status ? (before ? OLD.byStatusBefore : OLD.byStatus) : before ? OLD.before : OLD.list;
            const params: unknown[] = [tenant, limit];
            if (status) params.push(status);
            if (before) params.push(before);
            const old = await selectEntities(m, ExecutionEntity, sql, params);
            const now = await listExecutionsWithSecretsHeld(
              m,
              tenant,
              { status: status as never, before, limit },
              TAKING,
            );
            expect(now.found).toEqual(old);
            expect(now.holdsSecrets).toBe(tenant === 'nobody' ? false : holds[tenant]);
            cases += 1;
          }
        }
      }
    }
    expect(cases).toBeGreaterThan(500);
  });

  it('an execution or an operation by id: found as before, a 404 (another tenant’s id too) is null and still tells', async () => {
    const m = db.dataSource.manager;
    for (const tenant of ['acme', 'bare', 'elsewhere'] as const) {
      for (const owner of ['acme', 'bare', 'elsewhere'] as const) {
        const executionId = executions[owner][0];
        const operationId = operations[owner][0];
        const execution = await findExecutionWithSecretsHeld(m, executionId, tenant, TAKING);
        const operation = await findOperationWithSecretsHeld(m, operationId, tenant, TAKING);
        const versioned = await findOperationWithVersionAndSecretsHeld(m, operationId, tenant, TAKING);
        const [oldExecution] = await selectEntities(m, ExecutionEntity, READ_SQL.executionById, [executionId, tenant]);
        expect(execution.found).toEqual(oldExecution ?? null);
        expect(operation.found?.id ?? null).toBe(owner === tenant ? operationId : null);
        expect(versioned.found?.operation).toEqual(operation.found ?? undefined);
        if (owner === tenant) expect(versioned.found?.version).toMatch(/^[0-9a-f]{32}/);
        // What it tells is of the caller's tenant, never of the row's.
        for (const told of [execution, operation, versioned]) expect(told.holdsSecrets).toBe(holds[tenant]);
      }
    }
  });

  it("the review queue's count is the total it was, for every filter, of an empty queue too", async () => {
    const m = db.dataSource.manager;
    const filters: ReviewQueueFilter[] = [
      {},
      { connector: 'http' },
      { connector: 'none' },
      { q: 'k1' },
      { q: 'nothing-matches' },
      { reason: 'unreachable' as never },
      { escalated: true },
      { escalated: false, connector: 'sandbox.payments' },
    ];
    for (const tenant of ['acme', 'bare', 'elsewhere', 'nobody'] as const) {
      for (const queue of ['approvals', 'manual_reviews'] as ReviewQueue[]) {
        for (const filter of filters) {
          const params = filterParams(tenant, queue, filter);
          const [{ n }] = await rows<{ n: number }>(m, `SELECT count(*)::int AS n ${QUEUE_FILTER}`, params);
          for (const limit of [1, 50]) {
            const page = await reviewQueuePageWithSecretsHeld(m, tenant, queue, { ...filter, limit }, TAKING);
            expect(page.found.total).toBe(n);
            expect(page.found.operations.length).toBe(Math.min(n, limit));
            expect(page.found.more).toBe(n > limit);
            expect(page.holdsSecrets).toBe(tenant === 'nobody' ? false : holds[tenant]);
          }
        }
      }
    }
  });

  it('the probe is one index scan per statement (an InitPlan, by the primary key), not one per row found', async () => {
    const statements: [string, string, string, string][] = [
      ['listExecutions', READ_SQL.listExecutions, 'text,int,text[],float8', `'bare',200,'{http}',1048576`],
      [
        'byStatus',
        READ_SQL.listExecutionsByStatus,
        'text,int,text,text[],float8',
        `'bare',200,'created','{http}',1048576`,
      ],
      ['before', READ_SQL.listExecutionsBefore, 'text,int,text,text[],float8', `'bare',200,'exe_~','{http}',1048576`],
      [
        'byStatusBefore',
        READ_SQL.listExecutionsByStatusBefore,
        'text,int,text,text,text[],float8',
        `'bare',200,'created','exe_~','{http}',1048576`,
      ],
      ['execution', READ_SQL.executionByIdWithSecretsHeld, 'text,text,text[]', `'x','bare','{http}'`],
      ['operation', READ_SQL.operationByIdWithSecretsHeld, 'text,text,text[]', `'x','bare','{http}'`],
      ['versioned', READ_SQL.operationWithVersionById, 'text,text,text[]', `'x','bare','{http}'`],
      [
        'queue',
        REVIEW_QUEUE_SQL.countWithSecretsHeld,
        'text,text,text,boolean,text,text,text,text[]',
        `'bare','manual_reviews',null,null,null,null,null,'{http}'`,
      ],
    ];
    const runner = db.dataSource.createQueryRunner();
    try {
      await runner.startTransaction();
      // As in a table of many tenants: the primary key (tenant_id first) is what finds the tenant's first secret.
      await runner.query(`SET LOCAL enable_seqscan = off`);
      for (const [name, sql, types, args] of statements) {
        await runner.query(`PREPARE held_${name}(${types}) AS ${withColumns(runner.manager, sql)}`);
        const [{ 'QUERY PLAN': plan }] = (await runner.query(
          `EXPLAIN (ANALYZE, FORMAT JSON, COSTS OFF, TIMING OFF) EXECUTE held_${name}(${args})`,
        )) as { 'QUERY PLAN': { Plan: PlanNode }[] }[];
        const probes: PlanNode[] = [];
        const walk = (node: PlanNode) => {
          if (node['Relation Name'] === 'tenant_connector_secrets') probes.push(node);
          for (const child of node.Plans ?? []) walk(child);
        };
        walk(plan[0].Plan);
        expect({ name, probes: probes.map((p) => [p['Index Name'], p['Actual Loops'], p['Subplan Name']]) }).toEqual({
          name,
          probes: [['tenant_connector_secrets_pkey', 1, expect.stringMatching(/^InitPlan/)]],
        });
      }
    } finally {
      await runner.rollbackTransaction();
      await runner.release();
    }
  });
});

interface PlanNode {
  'Relation Name'?: string;
  'Index Name'?: string;
  'Actual Loops'?: number;
  'Subplan Name'?: string;
  Plans?: PlanNode[];
}
