import type { ProblemDetails as Problem } from '@verity/sdk';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, HttpResult, submission, unique } from '../support/http';
import { Execution, events, getOperation, settle, submit } from './dispatcher-helpers';

const CALLERS = 10;

/**
 * Ten tired callers press the same button at once — an agent's retry, an agent's cancel, the same Idempotency-Key
 * with different bodies, an admin's enable and delete of a webhook endpoint: each change is made once, and every
 * other caller is told why not, with nothing written twice.
 */
describe('ten concurrent callers of one state-changing endpoint', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await Stack.start({ label: 'concurrent-callers' });
  }, 60_000);
  afterAll(async () => stack?.stop());

  const call = <T>(method: string, path: string, key: string, body?: unknown, headers?: Record<string, string>) =>
    http<T>(stack.apiUrl, method, path, { key, body, headers });
  const all = <T>(send: () => Promise<HttpResult<T>>) => Promise.all(Array.from({ length: CALLERS }, send));
  const count = async (sql: string, params: unknown[]) =>
    ((await stack.db.dataSource.query(sql, params)) as { n: number }[])[0].n;
  const retriesOf = (operationId: string) =>
    count(`SELECT count(*)::int AS n FROM operations WHERE retry_of = $1`, [operationId]);

  type Retried = { operation: { id: string }; execution: { id: string } };

  /** One 201 and nine 409 already-retried naming it; one retry operation in one new execution. */
  async function expectOneRetry(operationId: string) {
    const answers = await all(() => call<Retried | Problem>('POST', `/v1/operations/${operationId}/retry`, DEMO.agent));
    const made = answers.filter((a) => a.status === 201);
    expect(made).toHaveLength(1);
    const winner = made[0].body as Retried;
    for (const lost of answers.filter((a) => a.status !== 201)) {
      expect(lost.status).toBe(409);
      expect(lost.body).toMatchObject({
        type: 'https://verity.dev/problems/already-retried',
        retried_by: { operation_id: winner.operation.id, execution_id: winner.execution.id },
      });
    }
    expect(await retriesOf(operationId)).toBe(1);
    expect(
      await count(`SELECT count(*)::int AS n FROM executions WHERE intent LIKE $1`, [`Retry of ${operationId} %`]),
    ).toBe(1);
  }

  it('retry of one FAILED operation: one retry operation, the others told which one exists', async () => {
    const failed = await settle(stack, (await submit(stack, [charge(`decline-${unique('cc-retry')}`)])).id);
    expect(failed.operations[0].status).toBe('FAILED');
    await expectOneRetry(failed.operations[0].id);
  });

  it('cancel: one 200, nine 409 already-decided (decision cancel), one cancel in the history; then one retry', async () => {
    const execution = await submit(stack, [charge(unique('cc-cancel'), { requires_approval: true })]);
    await waitFor(
      () => events(stack, execution.id),
      (log) => log.some((e) => e.type === 'approval.requested'),
    );
    const answers = await all(() =>
      call<Execution | Problem>('POST', `/v1/executions/${execution.id}/cancel`, DEMO.agent),
    );
    expect(answers.filter((a) => a.status === 200)).toHaveLength(1);
    for (const lost of answers.filter((a) => a.status !== 200)) {
      expect(lost.status).toBe(409);
      expect(lost.body).toMatchObject({ type: 'https://verity.dev/problems/already-decided', decision: 'cancel' });
    }
    const log = await events(stack, execution.id);
    expect(log.filter((e) => e.type === 'execution.status_changed' && e.to_status === 'cancelled')).toHaveLength(1);
    expect(log.filter((e) => e.type === 'operation.status_changed' && e.to_status === 'CANCELLED')).toHaveLength(1);

    const op = await getOperation(stack, execution.operations[0].id);
    expect(op.status).toBe('CANCELLED');
    await expectOneRetry(op.id);
  });

  it('one Idempotency-Key with ten different bodies: one execution; the others 422 reused or 409 in flight', async () => {
    const key = unique('cc-idem');
    const answers = await Promise.all(
      Array.from({ length: CALLERS }, () =>
        call<Execution | Problem>('POST', '/v1/executions', DEMO.agent, submission([charge(unique('cc-idem-order'))]), {
          'idempotency-key': key,
        }),
      ),
    );
    const made = answers.filter((a) => a.status === 201);
    expect(made).toHaveLength(1);
    expect(made[0].headers.get('idempotent-replayed')).toBeNull();
    for (const lost of answers.filter((a) => a.status !== 201)) {
      expect([
        [409, 'https://verity.dev/problems/idempotency-key-in-flight'],
        [422, 'https://verity.dev/problems/idempotency-key-reused'],
      ]).toContainEqual([lost.status, (lost.body as Problem).type]);
    }
    expect(await count(`SELECT count(*)::int AS n FROM executions WHERE idempotency_key = $1`, [key])).toBe(1);
    const id = (made[0].body as Execution).id;
    expect(await count(`SELECT count(*)::int AS n FROM operations WHERE execution_id = $1`, [id])).toBe(1);
  });

  it('webhook endpoint: ten enables of a disabled one re-enable it once; ten deletes delete it once', async () => {
    const put = await call('PUT', '/v1/admin/connector-settings/http', DEMO.admin, {
      allow_hosts: [{ host: '127.0.0.1', ports: [9], allow_private: true }],
    });
    expect(put.status).toBe(200);
    const created = await call<{ id: string }>('POST', '/v1/admin/webhooks', DEMO.admin, {
      url: 'http://127.0.0.1:9/cc',
      events: ['execution.finished'],
    });
    expect(created.status).toBe(201);
    const id = created.body.id;
    // As the delivery worker disables it after failed deliveries (no admin change).
    await stack.db.dataSource.query(
      `UPDATE webhook_endpoints SET disabled_at = now(), disabled_reason = 'failing', consecutive_failures = 5
       WHERE id = $1`,
      [id],
    );

    type Change = { before: { disabled: boolean } | null; after: { disabled: boolean } | null; endpoint_id: string };
    const history = async () =>
      (
        await call<{ data: Change[] }>('GET', '/v1/admin/changes?kind=webhook_endpoint&limit=200', DEMO.admin)
      ).body.data.filter((c) => c.endpoint_id === id);

    const enabled = await all(() => call<{ disabled: boolean }>('POST', `/v1/admin/webhooks/${id}/enable`, DEMO.admin));
    // An enable is idempotent: every caller is told it is enabled, and each is on the record (docs/api.md) — but only
    // one of them found it disabled: the others' entries show no change.
    expect(enabled.map((a) => [a.status, a.body.disabled])).toEqual(
      Array.from({ length: CALLERS }, () => [200, false]),
    );
    const enables = (await history()).filter((c) => c.before !== null && c.after !== null);
    expect(enables).toHaveLength(CALLERS);
    expect(enables.filter((c) => c.before!.disabled)).toHaveLength(1);
    expect(enables.every((c) => !c.after!.disabled)).toBe(true);

    const deleted = await all(() => call('DELETE', `/v1/admin/webhooks/${id}`, DEMO.admin));
    expect(deleted.map((a) => a.status).sort()).toEqual([204, ...Array.from({ length: CALLERS - 1 }, () => 404)]);
    expect((await history()).filter((c) => c.after === null)).toHaveLength(1);
  });
});
