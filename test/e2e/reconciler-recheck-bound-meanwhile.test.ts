import { DEMO, Stack, waitFor } from '../support/stack';
import {
  Call,
  Execution,
  TargetServer,
  httpOp,
  recordingClient,
  startTarget,
  submitOps,
  allowLoopbackPort,
} from './connectors-support';

/**
 * A reviewer's re-check whose read finds the effect of a hold the system may release (the source was unreachable),
 * while the tenant's admin binds read-backs (`read_back_binding: "bound"`) before the read is written: the read-back
 * names nothing of the effect, so it may not make the operation VERIFIED (the statement refuses it), and the operation
 * stays held. Before: the re-check then wrote nothing at all — no `operation.rechecked`, nothing of what the source
 * showed on the hold — and the reviewer's request was left as if never made. Now it is recorded as a re-check that did
 * not conclude, in the reviewer's name, and the request is used once.
 */
describe('a reviewer’s re-check whose VERIFIED is refused by a bind made during its read', () => {
  let stack: Stack;
  let target: TargetServer;
  let call: Call;

  beforeAll(async () => {
    target = await startTarget();
    stack = await Stack.start({
      label: 'recheckbound',
      // No scheduled re-check runs during the test: the only read after the hold is the reviewer's.
      env: { RECHECK_BACKOFF_MS: '600000', RECHECK_BACKOFF_MAX_MS: '600000', OBLIGATION_DUE_MS: '3600000' },
    });
    ({ call } = recordingClient(stack));
    await allowLoopbackPort(call, target.port);
  });
  afterAll(async () => {
    await stack?.stop();
    await target?.close();
  });

  const bind = (binding: 'bound' | 'declared') =>
    call('PUT', '/v1/admin/connector-settings/http', { key: DEMO.admin, body: { read_back_binding: binding } });

  type Logged = { type: string; operation_id: string | null; to_status: string | null; data: Record<string, unknown> };
  const log = async (executionId: string) =>
    (await call<{ data: Logged[] }>('GET', `/v1/executions/${executionId}/events`)).body.data;

  it('is recorded in the reviewer’s name with what it found, the hold kept, the request used once', async () => {
    const name = `status-${Date.now()}`;
    // The status page the read-back asks (it names nothing of the order) does not answer: the send is held.
    target.setState(name, 'unavailable');
    const created = await submitOps(call, [
      httpOp('order', {
        method: 'POST',
        url: `${target.base}/orders`,
        body: { id: '{{operation_id}}' },
        read_back: { url: `${target.base}/state/${name}`, field: '$.data.value', equals: 'ok' },
      }),
    ]);
    const held = await waitFor(
      async () => (await call<Execution>('GET', `/v1/executions/${created.id}`)).body.operations[0],
      (op) => op.status === 'MANUAL_REVIEW',
      60_000,
      150,
    );
    expect(held.terminal_reason).toBe('SOURCE_UNREACHABLE');

    // The reviewer's re-check reads the page under "declared", and its answer ("ok": found) is held back until the
    // admin has bound read-backs.
    const reads = () => target.seen.filter((s) => s.method === 'GET' && s.url === `/state/${name}`).length;
    const readsBefore = reads();
    const release = target.holdState(name, 'ok');
    const asked = await call('POST', `/v1/operations/${held.id}/recheck`, { key: DEMO.reviewer });
    expect(asked.status).toBe(202);
    await waitFor(
      async () => reads(),
      (n) => n > readsBefore,
      30_000,
      50,
    );
    expect((await bind('bound')).status).toBe(200);
    release();

    const events = await waitFor(
      () => log(created.id),
      (l) => l.some((e) => e.type === 'operation.rechecked' && e.data.trigger === 'reviewer'),
      30_000,
      150,
    );
    const rechecked = events.filter((e) => e.type === 'operation.rechecked');
    expect(rechecked).toHaveLength(1);
    expect(rechecked[0].data).toMatchObject({
      trigger: 'reviewer',
      requested_by: expect.any(String),
      result: 'found',
      held_for: 'SOURCE_UNREACHABLE',
      next_check_at: null,
    });
    expect(events.filter((e) => e.to_status === 'VERIFIED')).toEqual([]);
    const [row] = (await stack.db.dataSource.query(`SELECT status, obligation FROM operations WHERE id = $1`, [
      held.id,
    ])) as { status: string; obligation: { effect_shown?: { result: string } } }[];
    expect(row.status).toBe('MANUAL_REVIEW');
    // What the source showed is on the hold: a person's "did not happen" is refused from now on.
    expect(row.obligation.effect_shown).toMatchObject({ result: 'found' });
    const requests = (await stack.db.dataSource.query(
      `SELECT used_at IS NOT NULL AS used FROM recheck_requests WHERE operation_id = $1`,
      [held.id],
    )) as { used: boolean }[];
    expect(requests).toEqual([{ used: true }]);
    const failed = await call<{ type: string }>('POST', `/v1/operations/${held.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'FAILED', evidence: 'the provider has no such order' },
    });
    expect(failed.status).toBe(409);
    expect(failed.body.type).toMatch(/effect-exists$/);
  }, 150_000);
});
