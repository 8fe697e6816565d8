import { randomBytes } from 'node:crypto';
import { createApiKey } from '@verity/persistence/api-keys';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http, HttpResult, sms, submission, unique } from '../support/http';
import { startReceiver } from './webhook-receiver';
import type { WireSchemas } from '@verity/sdk';

/** A delivery as the admin API lists it: the wire contract's own type. */
type DeliveryView = WireSchemas['WebhookDelivery'];

/** A problem+json answer: the wire contract's own type. */
type Problem = WireSchemas['Problem'];

/**
 * Tired admins and a webhook: several redeliveries of one message at once (or a second click while the first round is
 * still being sent) send it once more, not once per click; an endpoint created while its host is taken off the
 * allowlist never receives anything.
 */
describe('webhooks under concurrent admin actions', () => {
  let stack: Stack;
  // `/slow` holds its answer for three seconds: a round is in flight that long (longer than ten requests to a busy API
  // take to arrive).
  const receiver = startReceiver((path) => ({ status: 204, afterMs: path === '/slow' ? 3_000 : 0 }));
  let base: string;
  let port: number;
  let otherAdmin: string;

  const call = <T>(method: string, path: string, key: string, body?: unknown): Promise<HttpResult<T>> =>
    http<T>(stack.apiUrl, method, path, { key, body });
  const sentWithId = async (id: string) => (await receiver).seen.filter((r) => r.headers['webhook-id'] === id).length;

  async function endpointAt(key: string, path: string): Promise<string> {
    const created = await call<{ id: string }>('POST', '/v1/admin/webhooks', key, {
      url: `${base}${path}`,
      events: ['execution.finished'],
    });
    expect(created.status).toBe(201);
    return created.body.id;
  }

  const deliveries = async (endpointId: string, key = DEMO.admin) =>
    (await call<{ data: DeliveryView[] }>('GET', `/v1/admin/webhooks/${endpointId}/deliveries`, key)).body.data;

  /** A finished execution's delivery to the endpoint, once delivered. */
  async function deliveredMessage(endpointId: string): Promise<DeliveryView> {
    const run = await call<{ id: string }>('POST', '/v1/executions', DEMO.agent, submission([sms(unique('wh-cc'))]));
    expect(run.status).toBe(201);
    return (await waitFor(
      async () => (await deliveries(endpointId)).find((d) => d.payload.data.execution_id === run.body.id),
      (d) => d?.status === 'delivered',
    ))!;
  }

  const redeliver = (endpointId: string, deliveryId: string) =>
    call<DeliveryView | Problem>(
      'POST',
      `/v1/admin/webhooks/${endpointId}/deliveries/${deliveryId}/redeliver`,
      DEMO.admin,
    );

  beforeAll(async () => {
    ({ base, port } = await receiver);
    stack = await Stack.start({
      label: 'webhooks-concurrent',
      env: {
        SECRETS_KEY: randomBytes(32).toString('base64'),
        WEBHOOK_SCAN_INTERVAL_MS: '100',
        WEBHOOK_BACKOFF_MS: '100',
        WEBHOOK_MAX_ATTEMPTS: '3',
        WEBHOOK_TIMEOUT_MS: '5000',
      },
    });
    otherAdmin = (
      await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo-other', role: 'admin', label: 'test' })
    ).key;
    for (const key of [DEMO.admin, otherAdmin]) {
      const put = await call('PUT', '/v1/admin/connector-settings/http', key, {
        allow_hosts: [{ host: '127.0.0.1', ports: [port], allow_private: true }],
      });
      expect(put.status).toBe(200);
    }
  }, 60_000);

  afterAll(async () => {
    await stack?.stop();
    await (await receiver).close();
  });

  it('ten redeliveries of one message at once: one 202, nine 409 delivery-pending, one more send', async () => {
    // The receiver holds its answer, so the round accepted first is still being sent when the others come.
    const endpointId = await endpointAt(DEMO.admin, '/slow');
    const delivery = await deliveredMessage(endpointId);
    expect(await sentWithId(delivery.id)).toBe(1);

    const answers = await Promise.all(Array.from({ length: 10 }, () => redeliver(endpointId, delivery.id)));
    const accepted = answers.filter((a) => a.status === 202);
    const refused = answers.filter((a) => a.status === 409);
    expect(accepted).toHaveLength(1);
    expect(refused).toHaveLength(9);
    for (const r of refused) {
      expect(r.headers.get('content-type')).toContain('application/problem+json');
      expect((r.body as Problem).type).toContain('delivery-pending');
      // When to come back: an attempt in flight has ended by then (WEBHOOK_TIMEOUT_MS and a second for the connect).
      expect(r.headers.get('retry-after')).toBe('6');
    }

    // The one round settles; the receiver got the message once more, and only once.
    const settled = await waitFor(
      async () => (await deliveries(endpointId)).find((d) => d.id === delivery.id)!,
      (d) => d.status === 'delivered' && d.redeliveries === 1,
    );
    expect(settled.attempts).toBe(2);
    expect(await sentWithId(delivery.id)).toBe(2);
  });

  it('a second click while the first redelivery is still being sent: 409, the message is not sent a third time', async () => {
    const endpointId = await endpointAt(DEMO.admin, '/slow');
    const delivery = await deliveredMessage(endpointId);
    expect(await sentWithId(delivery.id)).toBe(1);

    expect((await redeliver(endpointId, delivery.id)).status).toBe(202);
    // The receiver has the redelivered message and is holding its answer.
    await waitFor(
      () => sentWithId(delivery.id),
      (n) => n === 2,
    );
    const again = await redeliver(endpointId, delivery.id);
    expect(again.status).toBe(409);
    expect((again.body as Problem).type).toContain('delivery-pending');
    expect(again.headers.get('retry-after')).toBe('6');
    // The document says so too.
    const doc = (await (await fetch(`${stack.apiUrl}/docs-json`)).json()) as {
      paths: Record<string, { post: { responses: Record<string, { headers?: Record<string, unknown> }> } }>;
    };
    const conflict = doc.paths['/v1/admin/webhooks/{id}/deliveries/{delivery_id}/redeliver'].post.responses['409'];
    expect(conflict.headers).toHaveProperty('Retry-After');

    const settled = await waitFor(
      async () => (await deliveries(endpointId)).find((d) => d.id === delivery.id)!,
      (d) => d.status === 'delivered',
    );
    expect(settled).toMatchObject({ redeliveries: 1, attempts: 2 });
    expect(await sentWithId(delivery.id)).toBe(2);
    // Settled, it may be redelivered again.
    expect((await redeliver(endpointId, delivery.id)).status).toBe(202);
    await waitFor(
      async () => (await deliveries(endpointId)).find((d) => d.id === delivery.id)!,
      (d) => d.status === 'delivered' && d.redeliveries === 2,
    );
    expect(await sentWithId(delivery.id)).toBe(3);
  });

  it('an endpoint created while its host leaves the allowlist receives nothing: every send re-checks the allowlist', async () => {
    const path = '/removed';
    // The create and the removal at once: whichever way the race goes, nothing reaches the receiver.
    const [created, removed] = await Promise.all([
      call<{ id: string }>('POST', '/v1/admin/webhooks', otherAdmin, {
        url: `${base}${path}`,
        events: ['execution.finished'],
      }),
      call('PUT', '/v1/admin/connector-settings/http', otherAdmin, { allow_hosts: [] }),
    ]);
    expect(removed.status).toBe(200);
    expect([201, 400]).toContain(created.status);
    // Whether or not the create won the race, an endpoint made before the removal (as if it had) is still there.
    let endpointId = created.status === 201 ? created.body.id : null;
    if (!endpointId) {
      const put = await call('PUT', '/v1/admin/connector-settings/http', otherAdmin, {
        allow_hosts: [{ host: '127.0.0.1', ports: [port], allow_private: true }],
      });
      expect(put.status).toBe(200);
      endpointId = await endpointAt(otherAdmin, path);
      expect((await call('PUT', '/v1/admin/connector-settings/http', otherAdmin, { allow_hosts: [] })).status).toBe(
        200,
      );
    }

    const run = await call<{ id: string }>(
      'POST',
      '/v1/executions',
      DEMO.otherAgent,
      submission([sms(unique('wh-removed'))]),
    );
    expect(run.status).toBe(201);
    const delivery = await waitFor(
      async () => (await deliveries(endpointId, otherAdmin)).find((d) => d.payload.data.execution_id === run.body.id),
      (d) => d?.status === 'failed',
    );
    // Refused before anything was sent, and not retried.
    expect(delivery).toMatchObject({ attempts: 1 });
    expect(delivery!.last_error).toMatch(/allow/i);
    expect((await receiver).seen.filter((r) => r.path === path)).toHaveLength(0);
  });
});
