import type { ProblemDetails as Problem } from '@verity/sdk';
import { createApiKey } from '@verity/persistence/api-keys';
import { DEMO, Stack } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { Execution, Op, events, getOperation, submit, waitForApprovalRequest } from './dispatcher-helpers';

const ROUNDS = 20;

/**
 * Callers at once on different endpoints or tenants, where no other test races them: one Idempotency-Key sent by two
 * tenants at once (the key's in-flight guard is the tenant's, so neither is told "in flight" or replayed the other's),
 * and a reviewer's deny racing an agent's (or admin's) retries of the operation it cancels (a retry is made only of
 * what the deny ended, at most one, and the history holds one decision).
 */
describe('concurrent callers across tenants and endpoints', () => {
  let stack: Stack;
  let otherAdmin: string;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'red23-concurrent' });
    otherAdmin = (await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo-other', role: 'admin' })).key;
  }, 60_000);
  afterAll(async () => stack?.stop());

  const call = <T>(method: string, path: string, key: string, body?: unknown, headers?: Record<string, string>) =>
    http<T>(stack.apiUrl, method, path, { key, body, headers });
  const count = async (sql: string, params: unknown[]) =>
    ((await stack.db.dataSource.query(sql, params)) as { n: number }[])[0].n;

  it('one Idempotency-Key sent by two tenants at once: each its own execution, never in flight, never replayed', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const key = unique('red23-idem');
      const [mine, theirs] = await Promise.all(
        [DEMO.agent, DEMO.otherAgent].map((agent) =>
          call<Execution | Problem>('POST', '/v1/executions', agent, submission([charge(unique('red23-order'))]), {
            'idempotency-key': key,
          }),
        ),
      );
      expect([mine.status, theirs.status]).toEqual([201, 201]);
      expect(mine.headers.get('idempotent-replayed')).toBeNull();
      expect(theirs.headers.get('idempotent-replayed')).toBeNull();
      const [a, b] = [(mine.body as Execution).id, (theirs.body as Execution).id];
      expect(a).not.toBe(b);
      expect((await call('GET', `/v1/executions/${b}`, DEMO.agent)).status).toBe(404);
      expect((await call('GET', `/v1/executions/${a}`, DEMO.otherAgent)).status).toBe(404);
    }
  }, 120_000);

  it('one webhook Idempotency-Key sent by two tenants’ admins at once: each its own endpoint', async () => {
    for (const admin of [DEMO.admin, otherAdmin]) {
      const put = await call('PUT', '/v1/admin/connector-settings/http', admin, {
        allow_hosts: [{ host: '127.0.0.1', ports: [9], allow_private: true }],
      });
      expect(put.status).toBe(200);
    }
    for (let round = 0; round < 5; round++) {
      const key = unique('red23-whk');
      const answers = await Promise.all(
        [DEMO.admin, otherAdmin].map((admin) =>
          call<{ id: string; secret: string }>(
            'POST',
            '/v1/admin/webhooks',
            admin,
            { url: `http://127.0.0.1:9/${round}`, events: ['execution.finished'] },
            { 'idempotency-key': key },
          ),
        ),
      );
      expect(answers.map((a) => a.status)).toEqual([201, 201]);
      expect(answers[0].body.id).not.toBe(answers[1].body.id);
      for (const [i, admin] of [DEMO.admin, otherAdmin].entries()) {
        expect((await call('DELETE', `/v1/admin/webhooks/${answers[i].body.id}`, admin)).status).toBe(204);
      }
    }
  }, 120_000);

  it('a deny racing retries of the same operation: a retry only of what the deny cancelled, at most one', async () => {
    const created: Execution[] = await Promise.all(
      Array.from({ length: ROUNDS }, () => submit(stack, [charge(unique('red23-deny'), { requires_approval: true })])),
    );
    await Promise.all(created.map((e) => waitForApprovalRequest(stack, e.id)));
    for (const [round, execution] of created.entries()) {
      const opId = execution.operations[0].id;
      const deny = () =>
        call<Op | Problem>('POST', `/v1/operations/${opId}/approval`, DEMO.reviewer, { decision: 'deny' });
      const retry = () => call<unknown>('POST', `/v1/operations/${opId}/retry`, round % 2 ? DEMO.agent : DEMO.admin);
      const answers = await Promise.all(
        round % 2 ? [deny(), retry(), retry(), retry()] : [retry(), retry(), deny(), retry()],
      );
      const denied = answers.find((_, i) => i === (round % 2 ? 0 : 2))!;
      expect(denied.status).toBe(200);
      const retries = answers.filter((a) => a !== denied);
      const made = retries.filter((a) => a.status === 201);
      expect(made.length).toBeLessThanOrEqual(1);
      for (const lost of retries.filter((a) => a.status !== 201)) {
        expect(lost.status).toBe(409);
        expect([
          'https://verity.dev/problems/retry-not-allowed',
          'https://verity.dev/problems/already-retried',
        ]).toContain((lost.body as Problem).type);
      }
      expect(await count(`SELECT count(*)::int AS n FROM operations WHERE retry_of = $1`, [opId])).toBe(made.length);
      expect((await getOperation(stack, opId)).status).toBe('CANCELLED');
      const log = await events(stack, execution.id);
      expect(log.filter((e) => e.type === 'approval.decided')).toHaveLength(1);
    }
  }, 180_000);
});
