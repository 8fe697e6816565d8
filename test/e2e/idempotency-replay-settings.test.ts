import { DEMO, Stack } from '../support/stack';
import { charge, submission, unique } from '../support/http';
import { requestHash } from '../../apps/api/src/executions/idempotency';
import {
  Call,
  Execution,
  TargetServer,
  httpOp,
  recordingClient,
  startTarget,
  allowLoopbackPort,
} from './connectors-support';

/**
 * Red team (round 9, keys/idempotency): a replay of a request whose Idempotency-Key already holds an execution must be
 * answered as a replay (or 422 for another body) whatever the tenant's settings say now. The amount-cap check already
 * answers a held key first (connectors-spending); the checks made before the intake statement — read-back binding and
 * secrets — answered 400 validation-error ("nothing written") for a key that holds an execution which was written,
 * and may already have made its effect. An agent told 400 fixes its body and submits again under a new key: the
 * effect twice.
 */
describe('Idempotency-Key replay after the tenant changed its settings', () => {
  let stack: Stack;
  let target: TargetServer;
  let call: Call;

  beforeAll(async () => {
    target = await startTarget();
    target.setState('health', 'ok');
    stack = await Stack.start({ label: 'idemset' });
    ({ call } = recordingClient(stack));
    await allowLoopbackPort(call, target.port);
  });
  afterAll(async () => {
    await stack?.stop();
    await target?.close();
  });

  const setHttp = (body: unknown) =>
    call<{ read_back_binding: string }>('PUT', '/v1/admin/connector-settings/http', { key: DEMO.admin, body });

  it('read_back_binding switched to bound: the replay is the same execution, another body 422', async () => {
    const body = submission([
      httpOp(
        'order',
        {
          method: 'POST',
          url: `${target.base}/orders`,
          body: { id: '{{operation_id}}' },
          read_back: { url: `${target.base}/state/health`, field: '$.data.value', equals: 'ok' },
        },
        { requires_approval: true },
      ),
    ]);
    const key = `rbb-${Date.now()}`;
    const first = await call<Execution>('POST', '/v1/executions', { body, headers: { 'idempotency-key': key } });
    expect(first.status).toBe(201);
    try {
      expect((await setHttp({ read_back_binding: 'bound' })).status).toBe(200);
      const replay = await call<Execution & { type?: string }>('POST', '/v1/executions', {
        body,
        headers: { 'idempotency-key': key },
      });
      expect({ status: replay.status, type: replay.body.type }).toEqual({ status: 201, type: undefined });
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.body.id).toBe(first.body.id);
      const other = await call<{ type: string }>('POST', '/v1/executions', {
        body: { ...body, intent: 'another' },
        headers: { 'idempotency-key': key },
      });
      expect(other.status).toBe(422);
      expect(other.body.type).toBe('https://verity.dev/problems/idempotency-key-reused');
      // A free key with the same body: the binding answers, as before.
      const fresh = await call('POST', '/v1/executions', { body, headers: { 'idempotency-key': `${key}-new` } });
      expect(fresh.status).toBe(400);
    } finally {
      await setHttp({ read_back_binding: 'declared' });
      await call('POST', `/v1/executions/${first.body.id}/cancel`, {});
    }
  });

  it('a body a later version’s schema refuses: the replay of what an earlier version accepted, not 400', async () => {
    // An execution accepted under a key by an earlier version whose schema took a body this one refuses (the
    // sandbox.payments reference became printable ASCII / Latin-1 only): its record holds that body's hash.
    const accepted = submission([charge(unique('upgrade'))]);
    const key = unique('upgrade-key');
    const first = await call<Execution>('POST', '/v1/executions', {
      body: accepted,
      headers: { 'idempotency-key': key },
    });
    expect(first.status).toBe(201);
    const refusedNow = submission([charge(`${unique('upgrade')}\u2603`)]);
    await stack.db.dataSource.query(`UPDATE idempotency_keys SET request_hash = $1 WHERE key = $2`, [
      requestHash(refusedNow),
      key,
    ]);
    try {
      const fresh = await call('POST', '/v1/executions', { body: refusedNow });
      expect(fresh.status).toBe(400);
      const replay = await call<Execution & { type?: string }>('POST', '/v1/executions', {
        body: refusedNow,
        headers: { 'idempotency-key': key },
      });
      expect({ status: replay.status, type: replay.body.type }).toEqual({ status: 201, type: undefined });
      expect(replay.body.id).toBe(first.body.id);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
    } finally {
      await call('POST', `/v1/executions/${first.body.id}/cancel`, {});
    }
  });
});
