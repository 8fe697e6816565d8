import { randomBytes } from 'node:crypto';
import { DEMO, Stack, waitFor } from '../support/stack';
import { eventTransactions } from '../support/event-transactions';
import {
  Call,
  Op,
  Execution,
  TargetServer,
  httpOp,
  recordingClient,
  settled,
  startTarget,
  submitOps,
} from './connectors-support';

const SECRET = 'crm-secret-Zx81-never-shown';

interface SettingsView {
  connector: string;
  allow_hosts: { host: string; ports?: number[]; allow_private?: boolean; secrets?: string[] }[];
  secrets: string[];
  spending_caps: unknown[];
}

/**
 * The generic http connector against a real HTTP server on loopback (allowlisted explicitly by the tenant's
 * admin, since loopback is private): VERIFIED through a read-back, ACKNOWLEDGED without one, a declared rejection
 * FAILED, a timeout UNKNOWN then reconciled through its read-back; and a stored secret never shows anywhere.
 */
describe('http connector (real loopback target, tenant settings through the admin API)', () => {
  let stack: Stack;
  let target: TargetServer;
  let call: Call;
  let answers: string[];
  // The target may receive the CRM token, and `missing_token`, which is never set (bound by name all the same).
  const allowed = () => [
    { host: '127.0.0.1', ports: [target.port], allow_private: true, secrets: ['crm_token', 'missing_token'] },
  ];

  beforeAll(async () => {
    target = await startTarget({ slowMs: 3000 });
    // Debug logging: the secret check below greps the most verbose output the apps produce.
    stack = await Stack.start({
      label: 'connhttp',
      env: { LOG_LEVEL: 'debug', SECRETS_KEY: randomBytes(32).toString('base64') },
    });
    ({ call, answers } = recordingClient(stack));
    const put = await call<SettingsView>('PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { allow_hosts: allowed(), secrets: { crm_token: SECRET } },
    });
    expect(put.status).toBe(200);
  });
  afterAll(async () => {
    await stack?.stop();
    await target?.close();
  });

  const order = (path: string, extra: Record<string, unknown> = {}) => ({
    method: 'POST',
    url: `${target.base}${path}`,
    headers: { authorization: 'Bearer {{secret:crm_token}}' },
    body: { id: '{{operation_id}}', item: 'book' },
    ...extra,
  });
  const readBack = () => ({
    method: 'GET',
    url: `${target.base}/orders/{{operation_id}}`,
    field: '$.data.status',
    equals: 'created',
  });

  it('lets only the admin manage settings, and returns secret names, never values', async () => {
    const got = await call<SettingsView>('GET', '/v1/admin/connector-settings/http', { key: DEMO.admin });
    expect(got.body).toMatchObject({
      connector: 'http',
      allow_hosts: allowed(),
      secrets: ['crm_token'],
      spending_caps: [],
    });
    expect((await call('GET', '/v1/admin/connector-settings/http', { key: DEMO.agent })).status).toBe(403);
    expect((await call('GET', '/v1/admin/connector-settings/http', { key: DEMO.reviewer })).status).toBe(403);
    expect((await call('GET', '/v1/admin/connector-settings/nope', { key: DEMO.admin })).status).toBe(404);
    const list = await call<{ data: SettingsView[] }>('GET', '/v1/admin/connector-settings', { key: DEMO.admin });
    expect(list.body.data.map((s) => s.connector).sort()).toEqual(['http', 'sandbox.payments', 'sandbox.sms']);
  });

  it('refuses invalid settings with a problem naming the field', async () => {
    const bad = async (connector: string, body: unknown) =>
      call<{ errors: { field: string; rule: string }[] }>('PUT', `/v1/admin/connector-settings/${connector}`, {
        key: DEMO.admin,
        body,
      });
    const decimal = await bad('http', { allow_hosts: [{ host: '2130706433' }] });
    expect(decimal.status).toBe(400);
    expect(decimal.body.errors[0].field).toBe('allow_hosts[0].host');
    for (const secrets of [['crm token'], ['a', 'a'], '*']) {
      const unnamed = await bad('http', { allow_hosts: [{ host: 'crm.example.com', secrets }] });
      expect([secrets, unnamed.status]).toEqual([secrets, 400]);
      expect(unnamed.body.errors[0].field).toMatch(/^allow_hosts\[0\]\.secrets/);
    }
    expect((await bad('sandbox.sms', { allow_hosts: [{ host: 'example.com' }] })).body.errors[0]).toMatchObject({
      field: 'allow_hosts',
      rule: 'not_applicable',
    });
    expect((await bad('http', { spending_caps: [{ period: 'day', max_amount: 5 }] })).body.errors[0].field).toBe(
      'spending_caps[0].amount_field',
    );
    expect((await bad('http', { surprise: 1 })).status).toBe(400);
    // A cap summing a field no charge has would refuse every charge as unreadable: refused when set.
    const misspelled = await bad('sandbox.payments', {
      spending_caps: [{ period: 'day', max_amount: 5000, amount_field: 'amout' }],
    });
    expect(misspelled.status).toBe(400);
    expect(misspelled.body.errors[0]).toMatchObject({
      field: 'spending_caps[0].amount_field',
      rule: 'unknown_amount_field',
    });
  });

  it('serves the limitations per connector and per action from the declarations', async () => {
    const connectors = await call<{
      data: { name: string; can_reach_verified: boolean; actions: Record<string, unknown>[] }[];
    }>('GET', '/v1/connectors');
    const httpConnector = connectors.body.data.find((c) => c.name === 'http')!;
    expect(httpConnector).toMatchObject({ read_back: true, reversible: false, provider_idempotency: true });
    expect(httpConnector.actions[0]).toMatchObject({
      name: 'request',
      can_reach_verified: true,
      conditions: { read_back: expect.stringContaining('params.read_back') },
    });
    const sms = connectors.body.data.find((c) => c.name === 'sandbox.sms')!;
    expect(sms.actions[0]).toMatchObject({ can_reach_verified: false, provider_idempotency: false });
  });

  it('sends an approved request only on its baseline: changed while unreadable at send → asked again, nothing sent', async () => {
    const name = `stock-${Date.now()}`;
    target.setState(name, 'in-stock');
    const context = { url: `${target.base}/state/${name}`, field: '$.data.value' };
    const created = await submitOps(call, [
      httpOp('guarded', order('/orders', { context, read_back: readBack() }), { requires_approval: true }),
    ]);
    const opId = created.operations[0].id;
    type Logged = { type: string; to_status: string | null; data: Record<string, unknown> };
    const log = async () => (await call<{ data: Logged[] }>('GET', `/v1/executions/${created.id}/events`)).body.data;
    await waitFor(log, (l) => l.some((e) => e.type === 'approval.requested'), 30_000, 100);

    // The reviewer approves what was read ("in-stock"); at send the source cannot be read, so a read is owed.
    target.setState(name, 'unavailable');
    const approved = await call('POST', `/v1/operations/${opId}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'approve', reason: 'in stock' },
    });
    expect(approved.status).toBe(200);
    const unreadable = (e: Logged) => e.type === 'context.unavailable' && e.data.precondition === 'approval_baseline';
    await waitFor(log, (l) => l.some(unreadable), 30_000, 50);
    // When the source answers again it has changed: the grant was given on another state of the world.
    target.setState(name, 'sold-out');
    const after = await waitFor(log, (l) => l.some((e) => e.type === 'approval.stale_baseline'), 30_000, 100);
    expect(JSON.stringify(after.find((e) => e.type === 'approval.stale_baseline')!.data)).toContain('sold-out');
    expect(after.some((e) => e.to_status === 'SENT')).toBe(false);

    const denied = await call('POST', `/v1/operations/${opId}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'deny', reason: 'sold out' },
    });
    expect(denied.status).toBe(200);
    expect((await settled(call, created.id)).operations[0].status).toBe('CANCELLED');
    expect(target.seen.some((s) => s.method === 'POST' && s.body.includes(opId))).toBe(false);
  });

  it('sends under the settings stored at the send: a host taken off the allowlist during the context read is not called', async () => {
    // The target holds the context read until the admin has moved the allowlist, for a dispatcher that waits 8 s for
    // it (the stack's 1 s connector timeout was outlasted by a loaded machine's PUT, as a fixed delay of the answer
    // was: the send then went out under the allowlist as it was).
    for (const dispatcher of stack.running('dispatcher')) await stack.kill(dispatcher, 'SIGTERM');
    const slow = await stack.startApp('dispatcher', { CONNECTOR_TIMEOUT_MS: '8000' });
    try {
      const name = `slow-${Date.now()}`;
      const answerRead = target.holdState(name, 'ready');
      const context = { url: `${target.base}/state/${name}`, field: '$.data.value' };
      const created = await submitOps(call, [
        httpOp('late-settings', order('/orders', { context, read_back: readBack() })),
      ]);
      const opId = created.operations[0].id;
      // The advance job is in its context read, holding the settings it read with the execution.
      await waitFor(
        async () => target.seen.filter((s) => s.url === `/state/${name}`).length,
        (n) => n >= 1,
        15_000,
        20,
      );
      const moved = await call('PUT', '/v1/admin/connector-settings/http', {
        key: DEMO.admin,
        body: { allow_hosts: [{ host: 'api.example.com' }] },
      });
      answerRead();
      expect(moved.status).toBe(200);
      try {
        const done = await settled(call, created.id);
        // The read agreed (made through the allowlist as it was); the send, prepared again, met the new allowlist.
        expect(done.operations[0].status).not.toBe('VERIFIED');
        expect(target.seen.some((s) => s.method === 'POST' && s.body.includes(opId))).toBe(false);
      } finally {
        const back = await call('PUT', '/v1/admin/connector-settings/http', {
          key: DEMO.admin,
          body: { allow_hosts: allowed() },
        });
        expect(back.status).toBe(200);
      }
    } finally {
      await stack.kill(slow, 'SIGTERM');
      await stack.startApp('dispatcher');
    }
  });

  it('reads context in resolving_context through the tenant allowlist: already there → VERIFIED, nothing sent', async () => {
    const id = `ctx-${Date.now()}`;
    const first = await settled(
      call,
      (await submitOps(call, [httpOp('create', order('/orders', { body: { id, item: 'book' } }))])).id,
    );
    expect(first.operations[0].status).toBe('ACKNOWLEDGED');
    const postsBefore = target.seen.filter((s) => s.method === 'POST').length;

    const stateOf = { url: `${target.base}/orders/${id}`, field: '$.data.status', equals: 'created' };
    const again = await submitOps(call, [
      httpOp('create-again', order('/orders', { body: { id, item: 'book' }, context: stateOf, read_back: stateOf })),
    ]);
    const done = await settled(call, again.id);
    expect(done.operations[0]).toMatchObject({
      status: 'VERIFIED',
      attempt: 0,
      evidence: { method: 'context_read', no_change_required: true },
    });
    expect(target.seen.filter((s) => s.method === 'POST').length).toBe(postsBefore);
    const log = (await call<{ data: { type: string }[] }>('GET', `/v1/executions/${again.id}/events`)).body.data;
    expect(log.map((e) => e.type)).not.toContain('context.unavailable');
  });

  it('a conflict found by a read owed after failed ones holds the operation with its knowledge.conflict, in one transaction', async () => {
    // The context is unreadable (503) at first: an irreversible operation with an expected_state waits, unsent, and
    // its read is made again; then the source answers something else than the agent expected.
    const name = `owed-${Date.now()}`;
    target.setState(name, 'unavailable');
    const context = { url: `${target.base}/state/${name}`, field: '$.data.value' };
    const created = await submitOps(call, [
      httpOp('order', order('/orders', { context }), { expected_state: { 'data.value': 'open' } }),
    ]);
    type Logged = { id: string; type: string; operation_id: string | null; to_status: string | null };
    const log = async () => (await call<{ data: Logged[] }>('GET', `/v1/executions/${created.id}/events`)).body.data;
    await waitFor(log, (l) => l.some((e) => e.type === 'context.unavailable'), 30_000, 100);
    target.setState(name, 'closed');
    const done = await settled(call, created.id);
    expect(done.operations[0]).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'KNOWLEDGE_CONFLICT' });
    const history = await log();
    const conflict = history.find((e) => e.type === 'knowledge.conflict')!;
    const held = history.find((e) => e.to_status === 'MANUAL_REVIEW')!;
    const written = await eventTransactions(stack.db, created.id);
    expect(written.get(conflict.id)).toBe(written.get(held.id));
    expect(target.seen.filter((s) => s.method === 'POST' && s.body.includes(done.operations[0].id))).toHaveLength(0);
  });

  it('ends VERIFIED with read-back evidence, sending the secret only to the target', async () => {
    const execution = await submitOps(call, [httpOp('order', order('/orders', { read_back: readBack() }))]);
    expect(execution.operations[0].verification_method).toBe('read_after_write');
    const done = await settled(call, execution.id);
    const [op] = done.operations;
    expect(op).toMatchObject({ status: 'VERIFIED', verification_method: 'read_after_write' });
    expect(op.evidence).toMatchObject({
      method: 'read_after_write',
      source: `${target.base}/orders/${op.id}`,
      status: 200,
      field: 'data.status',
      record: { 'data.status': 'created' },
      expected: 'created',
    });
    const sent = target.seen.find((s) => s.method === 'POST' && s.body.includes(op.id))!;
    expect(sent.headers.authorization).toBe(`Bearer ${SECRET}`);
    expect(JSON.parse(sent.body)).toEqual({ id: op.id, item: 'book' });
  });

  it('ends ACKNOWLEDGED with an empty verification_method when the operation declares no read-back', async () => {
    const execution = await submitOps(call, [httpOp('order', order('/orders'))]);
    expect(execution.operations[0].verification_method).toBe('');
    const done = await settled(call, execution.id);
    expect(done.operations[0]).toMatchObject({ status: 'ACKNOWLEDGED', verification_method: '' });
    // Only the status is kept of the answer (the target echoed the Authorization header in its body).
    const [row] = (await stack.db.dataSource.query(`SELECT provider_ref FROM operations WHERE id = $1`, [
      done.operations[0].id,
    ])) as { provider_ref: unknown }[];
    expect(row.provider_ref).toEqual({ status: 201 });
  });

  it('refuses read_after_write for an operation without a read_back spec (400 naming the field)', async () => {
    const refused = await call<{ errors: { field: string; rule: string }[] }>('POST', '/v1/executions', {
      body: {
        agent_id: 'a',
        intent: 'i',
        operations: [httpOp('order', order('/orders'), { verification_method: 'read_after_write' })],
      },
    });
    expect(refused.status).toBe(400);
    expect(refused.body.errors[0]).toMatchObject({
      field: 'operations[0].verification_method',
      rule: 'read_back_available',
    });
  });

  it('ends FAILED (CONNECTOR_REJECTED) on a declared rejection code', async () => {
    const execution = await submitOps(call, [
      httpOp('order', order('/reject', { reject_statuses: [422], read_back: readBack() })),
    ]);
    const [op] = (await settled(call, execution.id)).operations;
    expect(op).toMatchObject({ status: 'FAILED', terminal_reason: 'CONNECTOR_REJECTED' });
    expect(op.evidence).toMatchObject({ provider_error: { code: 'invalid_order' } });
    // Only the provider's error code travels on; its message (the raw body) is never echoed.
    expect(JSON.stringify(op.evidence)).not.toContain('no such product');
  });

  it('an acknowledged call its read-back never finds is held (STALE_REPLICA), never FAILED: the 2xx says it was accepted', async () => {
    // The target accepts the order (201) but the declared read-back asks where it never shows (404 = absent): after the
    // settle window that reads as "no effect" — which the target's own acceptance contradicts.
    const lost = { ...readBack(), url: `${target.base}/orders/missing-{{operation_id}}` };
    const execution = await submitOps(call, [httpOp('order', order('/orders', { read_back: lost }))]);
    const [op] = (await settled(call, execution.id)).operations;
    expect(op).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'STALE_REPLICA', retry: 'console' });
    expect(op.acknowledged_at).toEqual(expect.any(String));
    const events = await call<{ data: { operation_id: string | null; to_status: string | null }[] }>(
      'GET',
      `/v1/executions/${execution.id}/events`,
    );
    const path = events.body.data.filter((e) => e.operation_id === op.id && e.to_status).map((e) => e.to_status);
    expect(path.slice(0, 4)).toEqual(['SENT', 'ACKNOWLEDGED', 'UNKNOWN', 'RECONCILING']);
    expect(path.at(-1)).toBe('MANUAL_REVIEW');
    expect(path).not.toContain('FAILED');
    // The order exists at the target, sent once.
    expect(target.seen.filter((s) => s.method === 'POST' && s.body.includes(op.id))).toHaveLength(1);
  });

  it('a timed-out call its declared read-back never finds is held (STALE_REPLICA), never FAILED: that read proves nothing', async () => {
    // The target took the order, then answered too late (UNKNOWN); the read-back the agent declared asks where the order
    // never shows (404). An empty answer at a URL the operation chose is no word of the provider's: before, this ended
    // FAILED PROVEN_ABSENT with retry "safe", and a retry sent the order a second time (red team).
    const lost = { ...readBack(), url: `${target.base}/orders/missing-{{operation_id}}` };
    const execution = await submitOps(call, [httpOp('order', order('/slow-orders', { read_back: lost }))]);
    const [op] = (await settled(call, execution.id)).operations;
    expect(op).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'STALE_REPLICA', retry: 'console' });
    expect(op.acknowledged_at ?? null).toBeNull();
    const events = await call<{ data: { operation_id: string | null; to_status: string | null }[] }>(
      'GET',
      `/v1/executions/${execution.id}/events`,
    );
    const path = events.body.data.filter((e) => e.operation_id === op.id && e.to_status).map((e) => e.to_status);
    expect(path.slice(0, 3)).toEqual(['SENT', 'UNKNOWN', 'RECONCILING']);
    expect(path).not.toContain('FAILED');
    expect(target.seen.filter((s) => s.method === 'POST' && s.body.includes(op.id))).toHaveLength(1);
  });

  it('a timed-out call whose declared read-back searches and answers an empty list: no record shown, a person may answer FAILED', async () => {
    // `{"data": []}` read at `data[0].status` found no record at all. Before, it read as "a record without the field"
    // (FIELD_MISSING): the effect counted as shown at the source, and a person's FAILED was refused for good (409
    // effect-exists) on the strength of an empty list.
    const search = {
      method: 'GET',
      url: `${target.base}/search?id={{operation_id}}`,
      field: 'data[0].status',
      equals: 'created',
    };
    const execution = await submitOps(call, [httpOp('order', order('/slow-orders', { read_back: search }))]);
    const [op] = (await settled(call, execution.id)).operations;
    expect(op).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'STALE_REPLICA', retry: 'console' });
    expect(op.acknowledged_at ?? null).toBeNull();
    expect(op.evidence).toMatchObject({ source: `${target.base}/search?id=${op.id}`, status: 200, record: null });
    const resolved = await call<Op>('POST', `/v1/operations/${op.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'FAILED', evidence: 'the target support desk confirmed no such order' },
    });
    expect([resolved.status, resolved.body]).toMatchObject([200, { status: 'FAILED' }]);
  });

  it('a timed-out call whose read-back finds its record with a null where the field goes: the record shown, a FAILED refused', async () => {
    // `{"data": {"id": <op>, "attributes": null}}` read at `data.attributes.status` is the record without its field.
    // Before, every null read as "no record" (absent): held STALE_REPLICA, and a person's FAILED ("no effect, a retry
    // is safe") was accepted while the record existed.
    const records = {
      method: 'GET',
      url: `${target.base}/records/{{operation_id}}`,
      field: 'data.attributes.status',
      equals: 'created',
    };
    const execution = await submitOps(call, [httpOp('order', order('/slow-orders', { read_back: records }))]);
    const [op] = (await settled(call, execution.id)).operations;
    expect(op).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'FIELD_MISSING' });
    expect(op.evidence).toMatchObject({ source: `${target.base}/records/${op.id}`, status: 200, record: null });
    const resolved = await call<Op & { type?: string }>('POST', `/v1/operations/${op.id}/resolve`, {
      key: DEMO.reviewer,
      body: { status: 'FAILED', evidence: 'the order list did not show it' },
    });
    expect([resolved.status, resolved.body.type]).toEqual([409, 'https://verity.dev/problems/effect-exists']);
  });

  it('ends UNKNOWN on a timeout, then is reconciled to VERIFIED through its read-back', async () => {
    const execution = await submitOps(call, [httpOp('order', order('/slow-orders', { read_back: readBack() }))]);
    const [op] = (await settled(call, execution.id)).operations;
    expect(op).toMatchObject({ status: 'VERIFIED' });
    const events = await call<{
      data: { operation_id: string | null; to_status: string | null; data: Record<string, unknown> }[];
    }>('GET', `/v1/executions/${execution.id}/events`);
    const path = events.body.data.filter((e) => e.operation_id === op.id && e.to_status).map((e) => e.to_status);
    expect(path).toEqual(['SENT', 'UNKNOWN', 'RECONCILING', 'VERIFIED']);
    const unknown = events.body.data.find((e) => e.operation_id === op.id && e.to_status === 'UNKNOWN')!;
    expect(unknown.data).toMatchObject({ reason: 'CONNECTOR_ERROR', detail: 'outcome unknown (ETIMEDOUT)' });
    expect(op.evidence).toMatchObject({ method: 'read_after_write', record: { 'data.status': 'created' } });
  });

  it('does not send when a referenced secret is not set (FAILED, SOURCE_UNREACHABLE, nothing reached the target)', async () => {
    const before = target.seen.length;
    const execution = await submitOps(call, [
      httpOp('order', order('/orders', { headers: { authorization: 'Bearer {{secret:missing_token}}' } })),
    ]);
    const [op] = (await settled(call, execution.id)).operations;
    expect(op).toMatchObject({ status: 'FAILED', terminal_reason: 'SOURCE_UNREACHABLE' });
    expect(op.evidence).toMatchObject({ detail: 'not sent: secret "missing_token" is not set for this tenant' });
    // Not transient: it fails the same way until an admin sets the secret, and says which one.
    expect(op.failure).toEqual({
      code: 'secret_not_set',
      phase: 'dispatch',
      category: 'policy',
      retryable: false,
      message:
        'never sent: a secret the call names is not set for this tenant: secret "missing_token" is not set for this tenant (terminal_reason SOURCE_UNREACHABLE)',
      at: expect.any(String),
    });
    expect(target.seen.length).toBe(before);
  });

  it('calls a host off the allowlist a policy refusal, not a transient one: never retryable, naming the host', async () => {
    const before = target.seen.length;
    const execution = await submitOps(call, [
      httpOp('order', order('/orders', { url: 'https://crm.not-allowed.example/orders' })),
    ]);
    const [op] = (await settled(call, execution.id)).operations;
    // Never sent: FAILED as the contract has it for a call that never left (status, reason and commit as before).
    expect(op).toMatchObject({ status: 'FAILED', terminal_reason: 'SOURCE_UNREACHABLE', commit: 'rejected' });
    // ...but it fails the same way until an admin changes the allowlist: a policy failure an agent must not retry.
    const failure = {
      code: 'egress_refused',
      phase: 'dispatch',
      category: 'policy',
      retryable: false,
      message:
        "never sent: the tenant's egress policy does not allow the target: host crm.not-allowed.example is not on this tenant's allowlist (terminal_reason SOURCE_UNREACHABLE)",
      at: expect.any(String),
    };
    expect(op.failure).toEqual(failure);
    expect((await call<{ failure: unknown }>('GET', `/v1/operations/${op.id}`)).body.failure).toEqual(failure);
    expect(JSON.stringify(op)).not.toContain(SECRET);
    expect(target.seen.length).toBe(before);
  });

  it('merges secrets by name and deletes one: names change, the allowlist is kept', async () => {
    const put = await call<SettingsView>('PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { secrets: { spare: 'spare-value-1', crm_token: SECRET } },
    });
    expect(put.body.secrets).toEqual(['crm_token', 'spare']);
    expect(put.body.allow_hosts).toHaveLength(1);
    expect((await call('DELETE', '/v1/admin/connector-settings/http/secrets/spare', { key: DEMO.admin })).status).toBe(
      204,
    );
    expect((await call('DELETE', '/v1/admin/connector-settings/http/secrets/spare', { key: DEMO.admin })).status).toBe(
      404,
    );
    const got = await call<SettingsView>('GET', '/v1/admin/connector-settings/http', { key: DEMO.admin });
    expect(got.body.secrets).toEqual(['crm_token']);
  });

  it('never shows a stored secret: not in any API answer, log line, event, or row, and stores it sealed', async () => {
    // Every read a client could make of what happened, recorded by the same client.
    const executions = await call<{ data: Execution[] }>('GET', '/v1/executions?limit=200');
    for (const execution of executions.body.data) {
      await call('GET', `/v1/executions/${execution.id}/events`);
      for (const op of execution.operations) await call('GET', `/v1/operations/${op.id}`);
    }
    await call('GET', '/v1/admin/connector-settings', { key: DEMO.admin });
    expect(answers.length).toBeGreaterThan(20);
    for (const answer of answers) expect(answer).not.toContain(SECRET);

    // The stack's own output (debug level), once every worker has had its say.
    await waitFor(
      async () => stack.logs(),
      (logs) => logs.includes('connector settings updated'),
    );
    const logs = stack.logs();
    expect(logs).toContain('crm_token');
    expect(logs).not.toContain(SECRET);

    const rows = async (sql: string) => JSON.stringify(await stack.db.dataSource.query(sql));
    const events = await rows('SELECT * FROM events');
    expect(events.length).toBeGreaterThan(1000);
    expect(events).not.toContain(SECRET);
    expect(await rows('SELECT * FROM operations')).not.toContain(SECRET);
    expect(await rows('SELECT * FROM executions')).not.toContain(SECRET);
    expect(await rows('SELECT * FROM tenant_connector_settings')).not.toContain(SECRET);
    // Not even in the secrets table: with SECRETS_KEY set it is stored sealed, and only the workers open it (the
    // target got the plain value, above).
    const stored = (await stack.db.dataSource.query(
      `SELECT value FROM tenant_connector_secrets WHERE connector = 'http' AND name = 'crm_token'`,
    )) as { value: string }[];
    expect(stored).toHaveLength(1);
    expect(stored[0].value).toMatch(/^v1:/);
    expect(await rows('SELECT * FROM tenant_connector_secrets')).not.toContain(SECRET);
  });
});
