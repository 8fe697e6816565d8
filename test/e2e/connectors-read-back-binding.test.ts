import { DEMO, Stack, waitFor } from '../support/stack';
import { submission } from '../support/http';
import {
  Call,
  Execution,
  TargetServer,
  httpOp,
  recordingClient,
  settled,
  startTarget,
  submitOps,
  allowLoopbackPort,
} from './connectors-support';
import type { WireSchemas } from '@verity/sdk';

type SettingsView = WireSchemas['ConnectorSettings'];

interface Refusal {
  type: string;
  errors: { field: string; rule: string; message: string }[];
}

/**
 * Red-team finding H2: an http operation's read-back is the agent's to declare, so it can ask a status page that always
 * says "ok" and a call that did nothing ends VERIFIED. The tenant's admin binds read-backs (`read_back_binding:
 * "bound"`): then a read-back counts only when it asks the request's own origin about this very effect. Refused at
 * intake (400, nothing written); an operation accepted before the switch is not verified by it afterwards.
 */
describe('http read_back_binding (admin setting, intake refusal, read after the switch)', () => {
  let stack: Stack;
  let target: TargetServer;
  let call: Call;

  beforeAll(async () => {
    target = await startTarget();
    // The target's status page: always "ok", whatever any call did.
    target.setState('health', 'ok');
    stack = await Stack.start({ label: 'rbbind' });
    ({ call } = recordingClient(stack));
    await allowLoopbackPort(call, target.port);
  });
  afterAll(async () => {
    await stack?.stop();
    await target?.close();
  });

  const setHttp = (body: unknown, connector = 'http') =>
    call<SettingsView & Refusal>('PUT', `/v1/admin/connector-settings/${connector}`, { key: DEMO.admin, body });
  const getHttp = async () =>
    (await call<SettingsView>('GET', '/v1/admin/connector-settings/http', { key: DEMO.admin })).body;
  const count = async (table: string) =>
    Number(((await stack.db.dataSource.query(`SELECT count(*) AS n FROM ${table}`)) as { n: string }[])[0].n);

  const order = (readBack?: Record<string, unknown>) => ({
    method: 'POST',
    url: `${target.base}/orders`,
    body: { id: '{{operation_id}}' },
    ...(readBack ? { read_back: readBack } : {}),
  });
  /** Names nothing of the effect: the status page. */
  const unbound = () => ({ url: `${target.base}/state/health`, field: '$.data.value', equals: 'ok' });
  /** Asks the request's origin about this very order. */
  const bound = () => ({ url: `${target.base}/orders/{{operation_id}}`, field: '$.data.status', equals: 'created' });
  /** Names the effect, but on another origin (another host name for the same server). */
  const elsewhere = () => ({ ...bound(), url: `http://localhost:${target.port}/orders/{{operation_id}}` });

  it('is "declared" until set; refuses an unknown value or another connector with 400, writing nothing', async () => {
    const before = await getHttp();
    expect(before.read_back_binding).toBe('declared');
    const changes = await count('admin_changes');

    const unknown = await setHttp({ read_back_binding: 'strict' });
    expect(unknown.status).toBe(400);
    expect(unknown.body.errors[0]).toMatchObject({ field: 'read_back_binding' });
    const sms = await setHttp({ read_back_binding: 'bound' }, 'sandbox.sms');
    expect(sms.status).toBe(400);
    expect(sms.body.errors[0]).toMatchObject({ field: 'read_back_binding', rule: 'not_applicable' });

    expect(await getHttp()).toEqual(before);
    expect(await count('admin_changes')).toBe(changes);
    expect(
      await stack.db.dataSource.query(`SELECT 1 FROM tenant_connector_settings WHERE connector = 'sandbox.sms'`),
    ).toEqual([]);
  });

  it('declared: an unbound read-back still verifies (the behaviour tenants rely on until they switch)', async () => {
    const execution = await submitOps(call, [httpOp('order', order(unbound()))]);
    const [op] = (await settled(call, execution.id)).operations;
    expect(op).toMatchObject({ status: 'VERIFIED', evidence: { source: `${target.base}/state/health` } });
  });

  it('bound: an unbound read-back is 400 read_back_unbound naming the broken condition, and nothing is written', async () => {
    const switched = await setHttp({ read_back_binding: 'bound' });
    expect(switched.status).toBe(200);
    expect(switched.body.read_back_binding).toBe('bound');
    const history = await call<{ data: { before: Record<string, unknown>; after: Record<string, unknown> }[] }>(
      'GET',
      '/v1/admin/changes',
      { key: DEMO.admin },
    );
    expect(history.body.data[0]).toMatchObject({
      before: { read_back_binding: 'declared' },
      after: { read_back_binding: 'bound' },
    });

    const executions = await count('executions');
    const operations = await count('operations');
    const refuse = async (readBack: Record<string, unknown>) => {
      const refused = await call<Refusal>('POST', '/v1/executions', {
        body: submission([httpOp('ok', order(bound())), httpOp('order', order(readBack))]),
      });
      expect(refused.status).toBe(400);
      expect(refused.headers.get('content-type')).toContain('application/problem+json');
      expect(refused.body.type).toMatch(/validation-error$/);
      return refused.body.errors;
    };
    expect(await refuse(unbound())).toEqual([
      { field: 'operations[1].params.read_back', rule: 'read_back_unbound', message: expect.stringMatching(/name/) },
    ]);
    expect(await refuse(elsewhere())).toEqual([
      {
        field: 'operations[1].params.read_back.url',
        rule: 'read_back_unbound',
        message: expect.stringContaining('own origin'),
      },
    ]);
    // {{operation_id}} only in equals names nothing: equals is compared, never sent.
    expect(await refuse({ ...unbound(), equals: '{{operation_id}}' })).toEqual([
      expect.objectContaining({ field: 'operations[1].params.read_back', rule: 'read_back_unbound' }),
    ]);
    expect(await count('executions')).toBe(executions);
    expect(await count('operations')).toBe(operations);
    expect(target.seen.filter((s) => s.method === 'POST')).toHaveLength(1);
  });

  it('bound: a bound read-back still reaches VERIFIED, and an operation without one ends ACKNOWLEDGED', async () => {
    const execution = await submitOps(call, [
      httpOp('bound', order(bound())),
      httpOp('header', order({ ...bound(), url: `${target.base}/orders/x`, headers: { 'x-id': '{{operation_id}}' } }), {
        verification_method: '',
      }),
      httpOp('plain', order()),
    ]);
    const done = await settled(call, execution.id);
    expect(done.operations.map((o) => [o.key, o.status])).toEqual([
      ['bound', 'VERIFIED'],
      ['header', 'ACKNOWLEDGED'],
      ['plain', 'ACKNOWLEDGED'],
    ]);
    expect(done.operations[0].evidence).toMatchObject({ source: `${target.base}/orders/${done.operations[0].id}` });
  });

  /** Events of an execution as stored, with the transaction that wrote each (`txid`, a column default). */
  type Stored = {
    seq: string;
    type: string;
    operation_id: string | null;
    from_status: string | null;
    to_status: string | null;
    txid: string;
  };
  const stored = async (executionId: string) =>
    (await stack.db.dataSource.query(
      `SELECT seq, type, operation_id, from_status, to_status, data, txid::text AS txid FROM events WHERE execution_id = $1 ORDER BY seq`,
      [executionId],
    )) as (Stored & { data: Record<string, unknown> })[];

  /**
   * A context read made under "declared" and held open by the target while the admin binds read-backs, with no sweep
   * to take a second look (the reconciler stopped): what the dispatcher's own job then writes is all the history has.
   */
  async function contextReadHeldAcrossTheBind(params: Record<string, unknown>, others: unknown[] = []) {
    expect((await setHttp({ read_back_binding: 'declared' })).status).toBe(200);
    const reconcilers = stack.running('reconciler');
    for (const reconciler of reconcilers) await stack.kill(reconciler, 'SIGTERM');
    const restartReconcilers = async () => {
      for (let stopped = reconcilers.splice(0).length; stopped > 0; stopped -= 1) await stack.startApp('reconciler');
    };
    try {
      const name = `ctx-${Date.now()}`;
      const release = target.holdState(name, 'ok');
      const context = { url: `${target.base}/state/${name}`, field: '$.data.value', equals: 'ok' };
      const created = await submitOps(call, [httpOp('order', { ...params, context }), ...others]);
      await waitFor(
        async () => target.seen.some((s) => s.method === 'GET' && s.url === `/state/${name}`),
        (asked) => asked,
        30_000,
        50,
      );
      expect((await setHttp({ read_back_binding: 'bound' })).status).toBe(200);
      release();
      // The job's look is over once the operation leaves PREPARED; the reconciler may then settle what the send left.
      await waitFor(
        async () => (await call<Execution>('GET', `/v1/executions/${created.id}`)).body.operations[0],
        (o) => o.status !== 'PREPARED',
        45_000,
        150,
      );
      await restartReconcilers();
      const [op] = (await settled(call, created.id)).operations;
      return { created, op, events: await stored(created.id) };
    } finally {
      await restartReconcilers();
      expect((await setHttp({ read_back_binding: 'declared' })).status).toBe(200);
    }
  }

  /** The context.unavailable of the unbound context read, written with the move out of resolving_context it explains. */
  function expectUnreadContextRecordedWithTheMove(
    events: (Stored & { data: Record<string, unknown> })[],
    operationId: string,
  ) {
    const unavailable = events.filter((e) => e.type === 'context.unavailable' && e.operation_id === operationId);
    expect(unavailable).toHaveLength(1);
    expect(unavailable[0].data).toMatchObject({
      proceeds: true,
      evidence: { read_back_binding: 'bound', unbound: ['names_effect'] },
    });
    const planned = events.find((e) => e.from_status === 'resolving_context' && e.to_status === 'planning')!;
    expect(planned.txid).toBe(unavailable[0].txid);
    expect(Number(planned.seq)).toBeGreaterThan(Number(unavailable[0].seq));
    const sent = events.find((e) => e.to_status === 'SENT' && e.operation_id === operationId)!;
    expect(Number(sent.seq)).toBeGreaterThan(Number(unavailable[0].seq));
  }

  it('a send refused for the bind made while its context was read is prepared again: the history says the context was not read', async () => {
    // No read-back: the operation ends ACKNOWLEDGED once sent. Its context read, made under "declared", agreed, and the
    // job's send was refused for the settings changed under it; the next try is prepared from what is stored now, where
    // that read is not made.
    const { op, events } = await contextReadHeldAcrossTheBind(order());
    expect(op.status).toBe('ACKNOWLEDGED');
    expect(target.seen.filter((s) => s.method === 'POST' && s.body.includes(op.id))).toHaveLength(1);
    expectUnreadContextRecordedWithTheMove(events, op.id);
  });

  it('with another operation beside it, the moves judged on a context read made before the bind are not written', async () => {
    // Two operations: the preparation's moves are written on their own, not with a send, and each operation is then
    // sent from running. Judged under "declared", the moves out of resolving_context would commit a read the stored
    // settings no longer count; they are written only while the settings are the ones read.
    const { op, events } = await contextReadHeldAcrossTheBind(order(), [httpOp('other', order())]);
    expect(op.status).toBe('ACKNOWLEDGED');
    expect(target.seen.filter((s) => s.method === 'POST' && s.body.includes(op.id))).toHaveLength(1);
    expectUnreadContextRecordedWithTheMove(events, op.id);
  });

  it('a context read that would verify without a send does not, once bound between the read and its write', async () => {
    // A bound read-back (the operation is read after write) and a context read of a status page: under "declared" its
    // "ok" would close the operation VERIFIED with no change required; once bound, it is sent and verified by its own
    // read-back instead.
    const { op, events } = await contextReadHeldAcrossTheBind(order(bound()));
    expect(op).toMatchObject({
      status: 'VERIFIED',
      no_change_required: false,
      evidence: { source: `${target.base}/orders/${op.id}` },
    });
    expect(target.seen.filter((s) => s.method === 'POST' && s.body.includes(op.id))).toHaveLength(1);
    expect(events.filter((e) => e.to_status === 'VERIFIED')).toHaveLength(1);
    expectUnreadContextRecordedWithTheMove(events, op.id);
  });

  it('a retry of an operation with an unbound read-back accepted before the switch is 400 read_back_unbound, nothing written', async () => {
    expect((await setHttp({ read_back_binding: 'declared' })).status).toBe(200);
    // Accepted under "declared", then denied: never sent, and safe to retry.
    const created = await submitOps(call, [httpOp('order', order(unbound()), { requires_approval: true })]);
    const opId = created.operations[0].id;
    await waitFor(
      async () => (await call<{ approval: { state: string } | null }>('GET', `/v1/operations/${opId}`)).body.approval,
      (approval) => approval?.state === 'requested',
      30_000,
      100,
    );
    const denied = await call('POST', `/v1/operations/${opId}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'deny', reason: 'not yet' },
    });
    expect(denied.status).toBe(200);
    expect((await setHttp({ read_back_binding: 'bound' })).status).toBe(200);
    try {
      const [executions, operations] = [await count('executions'), await count('operations')];
      // A retry is a new operation submitted now: refused as a submission of it is, not made to be sent and then held for
      // a person because nothing may read it back.
      const retried = await call<Refusal>('POST', `/v1/operations/${opId}/retry`);
      expect(retried.status).toBe(400);
      expect(retried.body.errors).toEqual([
        expect.objectContaining({ field: expect.stringMatching(/^params\.read_back/), rule: 'read_back_unbound' }),
      ]);
      expect([await count('executions'), await count('operations')]).toEqual([executions, operations]);
    } finally {
      expect((await setHttp({ read_back_binding: 'declared' })).status).toBe(200);
    }
  });

  it('an unbound read-back accepted before the switch never verifies after it: held for a person, the evidence says why', async () => {
    expect((await setHttp({ read_back_binding: 'declared' })).status).toBe(200);
    // Accepted under "declared", waiting for a reviewer's approval while the admin binds read-backs.
    const created = await submitOps(call, [httpOp('order', order(unbound()), { requires_approval: true })]);
    const opId = created.operations[0].id;
    type Logged = { type: string; to_status: string | null; data: Record<string, unknown> };
    const log = async () => (await call<{ data: Logged[] }>('GET', `/v1/executions/${created.id}/events`)).body.data;
    await waitFor(log, (l) => l.some((e) => e.type === 'approval.requested'), 30_000, 100);
    expect((await setHttp({ read_back_binding: 'bound' })).status).toBe(200);
    const statusReads = () => target.seen.filter((s) => s.method === 'GET' && s.url === '/state/health').length;
    const readsBefore = statusReads();
    const approved = await call('POST', `/v1/operations/${opId}/approval`, {
      key: DEMO.reviewer,
      body: { decision: 'approve', reason: 'ok' },
    });
    expect(approved.status).toBe(200);

    const held = await waitFor(
      async () => (await call<Execution>('GET', `/v1/executions/${created.id}`)).body.operations[0],
      // UNKNOWN too is a way there: a send the loaded machine timed out is settled by the reconciler, which does not read
      // an unbound source either.
      (op) => !['PREPARED', 'SENT', 'ACKNOWLEDGED', 'UNKNOWN'].includes(op.status),
      45_000,
      150,
    );
    expect(held).toMatchObject({ status: 'MANUAL_REVIEW', terminal_reason: 'SOURCE_UNREACHABLE' });
    expect(held.evidence).toMatchObject({
      method: 'read_after_write',
      read_back_binding: 'bound',
      unbound: ['names_effect'],
      error: expect.stringMatching(/^not read: /),
    });
    // The call was made once; the status page was never asked on its behalf after the switch.
    expect(target.seen.filter((s) => s.method === 'POST' && s.body.includes(opId))).toHaveLength(1);
    expect(statusReads()).toBe(readsBefore);
    const statuses = (await log()).filter((e) => e.to_status).map((e) => e.to_status);
    expect(statuses).not.toContain('VERIFIED');
  });
});
