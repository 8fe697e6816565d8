import { upsertConnectorSettings } from '@verity/persistence';
import { DEMO, Stack } from '../support/stack';
import { Call, httpOp, recordingClient, settled, startCanary, submitOps } from './connectors-support';
import type { WireSchemas } from '@verity/sdk';

/** A problem+json answer: the wire contract's own type. */
type Problem = WireSchemas['Problem'];

/**
 * Private addresses are the platform's own network (its API, its stores, a cloud's metadata service): with
 * TENANT_PRIVATE_EGRESS off (the default in production) no tenant admin can open them — an `allow_private` entry is
 * refused when written, and one written before the operator turned it off allows nothing private, for the http
 * connector and for webhooks alike. A canary on loopback must receive nothing.
 */
describe('private egress is the operator’s to grant (TENANT_PRIVATE_EGRESS=false)', () => {
  let stack: Stack;
  let call: Call;
  let canary: Awaited<ReturnType<typeof startCanary>>;

  beforeAll(async () => {
    canary = await startCanary();
    stack = await Stack.start({ label: 'privegress', env: { TENANT_PRIVATE_EGRESS: 'false' } });
    ({ call } = recordingClient(stack));
  });
  afterAll(async () => {
    await stack?.stop();
    await canary?.close();
  });

  it('refuses an allow_private entry from a tenant admin, naming it, and writes nothing', async () => {
    const refused = await call<Problem>('PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { allow_hosts: [{ host: 'api.example.com' }, { host: '127.0.0.1', allow_private: true }] },
    });
    expect(refused.status).toBe(400);
    expect(refused.body.errors).toEqual([
      expect.objectContaining({ field: 'allow_hosts[1].allow_private', rule: 'private_egress_disabled' }),
    ]);
    const settings = await call<{ allow_hosts: unknown[] }>('GET', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
    });
    expect(settings.body.allow_hosts).toEqual([]);
  });

  it('lets an entry written before the switch allow nothing private: not sent, no webhook to it', async () => {
    // As if written while private egress was still allowed.
    await upsertConnectorSettings(stack.db.dataSource.manager, 'demo', 'http', {
      allowHosts: [{ host: '127.0.0.1', ports: [canary.port], allow_private: true }],
      by: 'test',
    });
    const execution = await submitOps(call, [
      httpOp('call', { method: 'POST', url: `http://127.0.0.1:${canary.port}/orders`, body: { a: 1 } }),
    ]);
    const [op] = (await settled(call, execution.id)).operations;
    expect(op).toMatchObject({ status: 'FAILED', terminal_reason: 'SOURCE_UNREACHABLE' });
    expect(op.evidence?.detail).toMatch(/^not sent: egress refused: 127\.0\.0\.1 is a loopback address/);

    const webhook = await call<Problem>('POST', '/v1/admin/webhooks', {
      key: DEMO.admin,
      body: { url: `http://127.0.0.1:${canary.port}/hook`, events: ['operation.settled'] },
    });
    expect(webhook.status).toBe(400);
    expect(webhook.body.errors).toEqual([expect.objectContaining({ field: 'url', rule: 'egress_blocked' })]);
    expect(canary.hits()).toBe(0);
  });
});
