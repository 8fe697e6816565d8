import { randomBytes } from 'node:crypto';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http, HttpResult, sms, submission, unique } from '../support/http';
import type { WireSchemas } from '@verity/sdk';
import { startReceiver } from './webhook-receiver';

/** A delivery as the admin API lists it: the wire contract's own type. */
type DeliveryView = WireSchemas['WebhookDelivery'];

/**
 * Disabling an endpoint skips its pending deliveries in the transaction that disables it (docs/api.md: "its pending
 * deliveries are `skipped`"). They used to stay pending until their next attempt found the endpoint disabled; an
 * admin who re-enabled the endpoint before that attempt had them sent — events of before the disable, which the
 * enable promises are not delivered.
 */
describe('webhooks: disabling an endpoint skips its pending deliveries', () => {
  let stack: Stack;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  /** What the receiver answers to /hook for now. */
  let status = 500;

  const call = <T>(method: string, path: string, body?: unknown): Promise<HttpResult<T>> =>
    http<T>(stack.apiUrl, method, path, { key: DEMO.admin, body });
  const allow = (ports: number[]) =>
    call('PUT', '/v1/admin/connector-settings/http', {
      allow_hosts: ports.map((port) => ({ host: '127.0.0.1', ports: [port], allow_private: true })),
    });
  const finish = async () => {
    const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([sms(unique('whskip'))]),
    });
    expect(created.status).toBe(201);
    return created.body.id;
  };
  const sentFor = (executionId: string) =>
    receiver.seen.filter((s) => (JSON.parse(s.body) as DeliveryView['payload']).data.execution_id === executionId);

  beforeAll(async () => {
    receiver = await startReceiver(() => ({ status }));
    stack = await Stack.start({
      label: 'whskippending',
      env: {
        SECRETS_KEY: randomBytes(32).toString('base64'),
        WEBHOOK_SCAN_INTERVAL_MS: '100',
        // A failed first attempt is retried only after ten minutes: until then the delivery is held pending.
        WEBHOOK_BACKOFF_MS: '600000',
        WEBHOOK_MAX_ATTEMPTS: '2',
        WEBHOOK_DISABLE_AFTER: '1',
      },
    });
    expect((await allow([receiver.port])).status).toBe(200);
  }, 60_000);

  afterAll(async () => {
    await stack?.stop();
    await receiver?.close();
  });

  it('marks them skipped with the disable, and an enable does not send them; a new event is delivered', async () => {
    const endpoint = await call<{ id: string }>('POST', '/v1/admin/webhooks', {
      url: `${receiver.base}/hook`,
      events: ['execution.finished'],
    });
    expect(endpoint.status).toBe(201);
    const deliveries = async () =>
      (await call<{ data: DeliveryView[] }>('GET', `/v1/admin/webhooks/${endpoint.body.id}/deliveries`)).body.data;
    const of = (log: DeliveryView[], executionId: string) =>
      log.filter((d) => d.payload.data.execution_id === executionId);

    // Two deliveries tried once (the receiver fails them) and held pending for their retry.
    const held = [await finish(), await finish()];
    await waitFor(deliveries, (log) => held.every((id) => of(log, id).length === 1 && of(log, id)[0].attempts === 1));
    for (const id of held) expect(sentFor(id)).toHaveLength(1);
    const before = await deliveries();
    expect(held.map((id) => of(before, id)[0].status)).toEqual(['pending', 'pending']);

    // A third fails for good (its target is refused: no retry), which disables the endpoint (WEBHOOK_DISABLE_AFTER 1).
    expect((await allow([])).status).toBe(200);
    const trigger = await finish();
    await waitFor(
      () => call<{ disabled: boolean }>('GET', `/v1/admin/webhooks/${endpoint.body.id}`),
      (r) => r.body.disabled,
    );
    // The held ones are skipped by then: the log shows it with the disable, not at their next attempt (ten minutes on).
    const after = await deliveries();
    expect(of(after, trigger).map((d) => d.status)).toEqual(['failed']);
    expect(held.map((id) => of(after, id)[0].status)).toEqual(['skipped', 'skipped']);

    // Re-enabled, with the receiver and its allowlist entry back: a new event is delivered, the held ones are not.
    status = 204;
    expect((await allow([receiver.port])).status).toBe(200);
    expect((await call('POST', `/v1/admin/webhooks/${endpoint.body.id}/enable`)).status).toBe(200);
    const fresh = await finish();
    await waitFor(deliveries, (log) => of(log, fresh).some((d) => d.status === 'delivered'));
    expect(sentFor(fresh).map((s) => s.answered)).toEqual([204]);
    for (const id of held) expect(sentFor(id).map((s) => s.answered)).toEqual([500]);
    const last = await deliveries();
    expect(held.map((id) => of(last, id)[0].status)).toEqual(['skipped', 'skipped']);
  });
});
