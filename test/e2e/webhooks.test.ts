import { randomBytes } from 'node:crypto';
import { createApiKey, findActiveKey } from '@verity/persistence/api-keys';
import { Webhook } from 'standardwebhooks';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, HttpResult, sms, submission, unique } from '../support/http';
import { Received, startReceiver } from './webhook-receiver';
import type { WireSchemas } from '@verity/sdk';

interface Body {
  type: string;
  timestamp: string;
  data: Record<string, unknown> & { execution_id?: string; operation_key?: string; status?: string };
}

type EndpointView = WireSchemas['WebhookEndpoint'] & { secret?: string };

/** An entry of `GET /v1/admin/changes?kind=webhook_endpoint`. */
interface EndpointChange {
  id: string;
  kind: string;
  connector: string | null;
  endpoint_id: string;
  by: string;
  at: string;
  before: Record<string, unknown> | null;
  after: Record<string, unknown> | null;
}

/** A delivery as the admin API lists it: the wire contract's own type. */
type DeliveryView = WireSchemas['WebhookDelivery'];

/**
 * A receiver on loopback: `/ok*` answers 204, `/flaky` answers 500 to the first two attempts of each message
 * (`webhook-id`) and 204 after, `/down` always 500.
 */
function startWebhookReceiver() {
  return startReceiver((path, attempt) => ({
    status: path === '/down' || (path === '/flaky' && attempt <= 2) ? 500 : 204,
  }));
}

/**
 * Webhooks end to end (real processes, a real receiver on loopback allow-listed through the admin API): every
 * delivery's signature verifies with `standardwebhooks`, a failing receiver sees retries, another tenant sees nothing,
 * an endpoint that keeps failing is disabled (and says so), redelivery works, and an SSRF target is refused.
 */
describe('webhooks', () => {
  let stack: Stack;
  let receiver: Awaited<ReturnType<typeof startWebhookReceiver>>;
  let otherAdmin: string;
  const secrets = new Map<string, string>();
  const endpoints: Record<'all' | 'flaky' | 'down' | 'other', EndpointView> = {} as never;

  const call = <T>(method: string, path: string, key: string, body?: unknown): Promise<HttpResult<T>> =>
    http<T>(stack.apiUrl, method, path, { key, body });

  const at = (path: string) => receiver.seen.filter((r) => r.path === path);
  const bodyOf = (r: Received) => JSON.parse(r.body) as Body;
  const finishedAt = (path: string, executionId: string) =>
    at(path).filter((r) => {
      const b = bodyOf(r);
      return b.type === 'execution.finished' && b.data.execution_id === executionId && r.answered < 300;
    });

  async function submitAndWait(key: string, operations: unknown[], extra: Record<string, unknown> = {}) {
    const created = await call<{ id: string }>('POST', '/v1/executions', key, submission(operations, extra));
    expect(created.status).toBe(201);
    return created.body.id;
  }

  async function createEndpoint(key: string, path: string, events: string[]): Promise<EndpointView> {
    const created = await call<EndpointView>('POST', '/v1/admin/webhooks', key, {
      url: `${receiver.base}${path}`,
      events,
    });
    expect(created.status).toBe(201);
    // The 201 names the endpoint as it was asked for, with its signing secret (shown this once).
    expect(created.body).toMatchObject({ id: expect.any(String), url: `${receiver.base}${path}`, events });
    expect(created.body.secret).toMatch(/^whsec_/);
    // The answer that shows the signing secret is kept by no cache (a browser's, a proxy's).
    expect(created.headers.get('cache-control')).toBe('no-store');
    secrets.set(created.body.id, created.body.secret!);
    return created.body;
  }

  /** Every request the receiver got carries a valid Standard Webhooks signature of the endpoint it was sent for. */
  function expectAllSigned(path: string, endpointId: string) {
    const wh = new Webhook(secrets.get(endpointId)!);
    for (const r of at(path)) {
      const verified = wh.verify(r.body, r.headers as Record<string, string>) as Body;
      expect(verified.type).toBe(bodyOf(r).type);
      expect(String(r.headers['webhook-id'])).toMatch(/^msg_/);
      // Standard Webhooks: the headers are the message id, the send time in whole seconds and `v1,<base64>`; the body
      // is `{ type, timestamp, data }` and nothing else, its timestamp an ISO 8601 time.
      expect(String(r.headers['webhook-timestamp'])).toMatch(/^\d+$/);
      expect(String(r.headers['webhook-signature'])).toMatch(/^v1,[A-Za-z0-9+/]+=*( |$)/);
      expect(Object.keys(verified).sort()).toEqual(['data', 'timestamp', 'type']);
      expect(new Date(verified.timestamp).toISOString()).toBe(verified.timestamp);
      expect(typeof verified.data).toBe('object');
    }
  }

  beforeAll(async () => {
    receiver = await startWebhookReceiver();
    stack = await Stack.start({
      label: 'webhooks',
      env: {
        SECRETS_KEY: randomBytes(32).toString('base64'),
        WEBHOOK_SCAN_INTERVAL_MS: '100',
        WEBHOOK_BACKOFF_MS: '100',
        WEBHOOK_MAX_ATTEMPTS: '3',
        WEBHOOK_DISABLE_AFTER: '2',
      },
    });
    otherAdmin = (
      await createApiKey(stack.db.dataSource.manager, { tenantId: 'demo-other', role: 'admin', label: 'test' })
    ).key;
    for (const key of [DEMO.admin, otherAdmin]) {
      const put = await call('PUT', '/v1/admin/connector-settings/http', key, {
        allow_hosts: [{ host: '127.0.0.1', ports: [receiver.port], allow_private: true }],
      });
      expect(put.status).toBe(200);
    }
    const all = [
      'operation.settled',
      'operation.needs_review',
      'obligation.escalated',
      'execution.finished',
      'outcome.evaluated',
      'webhook.disabled',
    ];
    endpoints.all = await createEndpoint(DEMO.admin, '/ok', all);
    endpoints.flaky = await createEndpoint(DEMO.admin, '/flaky', ['execution.finished']);
    endpoints.down = await createEndpoint(DEMO.admin, '/down', ['execution.finished']);
    endpoints.other = await createEndpoint(otherAdmin, '/ok-other', all);
  }, 60_000);

  afterAll(async () => {
    await stack?.stop();
    await receiver?.close();
  });

  it('is managed by the tenant admin only; the secret is shown once; SSRF targets are refused', async () => {
    const list = await call<{ data: EndpointView[] }>('GET', '/v1/admin/webhooks', DEMO.admin);
    expect(list.status).toBe(200);
    expect(list.body.data.map((e) => e.id)).toEqual([endpoints.all.id, endpoints.flaky.id, endpoints.down.id]);
    expect(list.text).not.toContain('whsec_');
    expect((await call('GET', '/v1/admin/webhooks', DEMO.agent)).status).toBe(403);
    expect((await call('GET', '/v1/admin/webhooks', DEMO.reviewer)).status).toBe(403);
    expect(
      (
        await call('POST', '/v1/admin/webhooks', DEMO.reviewer, {
          url: `${receiver.base}/ok`,
          events: ['execution.finished'],
        })
      ).status,
    ).toBe(403);
    // Another tenant's admin sees none of it.
    expect((await call('GET', `/v1/admin/webhooks/${endpoints.all.id}`, otherAdmin)).status).toBe(404);
    expect((await call('DELETE', `/v1/admin/webhooks/${endpoints.all.id}`, otherAdmin)).status).toBe(404);
    expect((await call('GET', `/v1/admin/webhooks/${endpoints.all.id}/deliveries`, otherAdmin)).status).toBe(404);
    expect((await call('POST', `/v1/admin/webhooks/${endpoints.all.id}/enable`, otherAdmin)).status).toBe(404);

    // A private address not on the allowlist, loopback on another port, a metadata address: 400 naming the field.
    for (const url of [
      'http://10.0.0.5/hook',
      'http://127.0.0.1:1/hook',
      'http://169.254.169.254/latest',
      'file:///etc/passwd',
    ]) {
      const refused = await call<{ errors: { field: string; rule: string }[] }>(
        'POST',
        '/v1/admin/webhooks',
        DEMO.admin,
        {
          url,
          events: ['execution.finished'],
        },
      );
      expect(refused.status).toBe(400);
      expect(refused.headers.get('content-type')).toContain('application/problem+json');
      expect(refused.body.errors).toEqual([expect.objectContaining({ field: 'url', rule: 'egress_blocked' })]);
    }
    const badEvent = await call<{ errors: { field: string }[] }>('POST', '/v1/admin/webhooks', DEMO.admin, {
      url: `${receiver.base}/ok`,
      events: ['operation.whatever'],
    });
    expect(badEvent.status).toBe(400);
    expect(badEvent.body.errors[0].field).toBe('events[0]');
    const extra = await call('POST', '/v1/admin/webhooks', DEMO.admin, {
      url: `${receiver.base}/ok`,
      events: ['execution.finished'],
      secret: 'mine',
    });
    expect(extra.status).toBe(400);
    const after = await call<{ data: EndpointView[] }>('GET', '/v1/admin/webhooks', DEMO.admin);
    expect(after.body.data).toHaveLength(3);
  });

  it('delivers signed events, retries a failing receiver, and tells no other tenant', async () => {
    const demoRun = await submitAndWait(DEMO.agent, [charge(unique('wh-charge')), sms(unique('wh-sms'))], {
      criteria: [{ key: 'paid', operation: 'charge', expect_status: 'VERIFIED' }],
    });
    const otherRun = await submitAndWait(DEMO.otherAgent, [sms(unique('wh-other'))]);

    await waitFor(
      async () => finishedAt('/ok', demoRun).length,
      (n) => n === 1,
    );
    await waitFor(
      async () => finishedAt('/ok-other', otherRun).length,
      (n) => n === 1,
    );
    // The flaky receiver answered 500 twice, then took the same message on the third attempt.
    await waitFor(
      async () => finishedAt('/flaky', demoRun).length,
      (n) => n === 1,
    );
    const flaky = at('/flaky').filter((r) => bodyOf(r).data.execution_id === demoRun);
    expect(flaky.map((r) => r.answered)).toEqual([500, 500, 204]);
    expect(new Set(flaky.map((r) => r.headers['webhook-id'])).size).toBe(1);

    const demoTypes = at('/ok')
      .map(bodyOf)
      .filter((b) => b.data.execution_id === demoRun);
    expect(demoTypes).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          type: 'operation.settled',
          data: expect.objectContaining({ operation_key: 'charge', status: 'VERIFIED' }),
        }),
        expect.objectContaining({
          type: 'operation.settled',
          data: expect.objectContaining({ operation_key: 'notify', status: 'ACKNOWLEDGED' }),
        }),
        expect.objectContaining({ type: 'outcome.evaluated' }),
        expect.objectContaining({ type: 'execution.finished', data: expect.objectContaining({ status: 'completed' }) }),
      ]),
    );
    // execution.finished says whether the effects happened, not only where the agent's work stands: each operation's
    // status and commit, as GET shows them.
    const finished = bodyOf(finishedAt('/ok', demoRun)[0]);
    const shown = await call<{ operations: { id: string; key: string; status: string; commit: string }[] }>(
      'GET',
      `/v1/executions/${demoRun}`,
      DEMO.agent,
    );
    expect(finished.data.operations).toEqual(
      shown.body.operations.map(({ id, key, status, commit }) => ({ id, key, status, commit })),
    );
    expect(finished.data.operations).toEqual([
      expect.objectContaining({ key: 'charge', status: 'VERIFIED', commit: 'committed' }),
      expect.objectContaining({ key: 'notify', status: 'ACKNOWLEDGED', commit: 'unknown' }),
    ]);
    // Nothing crossed tenants, in either direction.
    expect(at('/ok-other').every((r) => bodyOf(r).data.execution_id === otherRun)).toBe(true);
    expect(at('/ok').some((r) => bodyOf(r).data.execution_id === otherRun)).toBe(false);
    expectAllSigned('/ok', endpoints.all.id);
    expectAllSigned('/flaky', endpoints.flaky.id);
    expectAllSigned('/ok-other', endpoints.other.id);
    // A signature made with another endpoint's secret does not verify.
    const stranger = at('/ok-other')[0];
    expect(() =>
      new Webhook(secrets.get(endpoints.all.id)!).verify(stranger.body, stranger.headers as never),
    ).toThrow();

    // The receiver notes a request before it answers, and the reconciler records the attempt after the answer: the
    // log is read once it has.
    const flakyDelivery = await waitFor(
      async () =>
        (
          await call<{ data: DeliveryView[] }>('GET', `/v1/admin/webhooks/${endpoints.flaky.id}/deliveries`, DEMO.admin)
        ).body.data.find((d) => d.payload.data.execution_id === demoRun)!,
      (d) => d !== undefined && d.status !== 'pending',
    );
    expect(flakyDelivery).toMatchObject({
      type: 'execution.finished',
      status: 'delivered',
      attempts: 3,
      last_response_status: 204,
    });
  });

  it('announces a hold and its escalation', async () => {
    expect((await call('PUT', '/v1/admin/policy', DEMO.admin, { obligation_due_seconds: { default: 1 } })).status).toBe(
      200,
    );
    await stack.setFaults({ read_fault: 'field_missing' });
    try {
      const run = await submitAndWait(DEMO.agent, [charge(unique('wh-held'))]);
      const escalated = await waitFor(
        async () =>
          at('/ok')
            .map(bodyOf)
            .filter((b) => b.data.execution_id === run),
        (bodies) => bodies.some((b) => b.type === 'obligation.escalated'),
      );
      expect(escalated.find((b) => b.type === 'operation.needs_review')?.data).toMatchObject({
        operation_key: 'charge',
        status: 'MANUAL_REVIEW',
        terminal_reason: 'FIELD_MISSING',
      });
      expect(escalated.find((b) => b.type === 'obligation.escalated')?.data).toMatchObject({
        operation_key: 'charge',
        detail: expect.objectContaining({ to: 'on-call' }),
      });
      expectAllSigned('/ok', endpoints.all.id);
    } finally {
      await stack.setFaults({ read_fault: null });
      await call('PUT', '/v1/admin/policy', DEMO.admin, { obligation_due_seconds: null });
    }
  });

  it('redelivers a message on request, with the same webhook-id and a fresh signature', async () => {
    const log = await call<{ data: DeliveryView[] }>(
      'GET',
      `/v1/admin/webhooks/${endpoints.all.id}/deliveries`,
      DEMO.admin,
    );
    const delivery = log.body.data.find((d) => d.type === 'execution.finished' && d.status === 'delivered')!;
    const before = at('/ok').filter((r) => r.headers['webhook-id'] === delivery.id).length;
    expect(before).toBe(1);
    const again = await call<DeliveryView>(
      'POST',
      `/v1/admin/webhooks/${endpoints.all.id}/deliveries/${delivery.id}/redeliver`,
      DEMO.admin,
    );
    expect(again.status).toBe(202);
    expect(again.body).toMatchObject({ id: delivery.id, status: 'pending', redeliveries: 1 });
    await waitFor(
      async () => at('/ok').filter((r) => r.headers['webhook-id'] === delivery.id).length,
      (n) => n === 2,
    );
    expectAllSigned('/ok', endpoints.all.id);
    await waitFor(
      async () =>
        (
          await call<{ data: DeliveryView[] }>('GET', `/v1/admin/webhooks/${endpoints.all.id}/deliveries`, DEMO.admin)
        ).body.data.find((d) => d.id === delivery.id)!,
      (d) => d.status === 'delivered' && d.attempts === 2,
    );
    const redeliver = (endpointId: string, deliveryId: string, key: string) =>
      call<{ title: string; detail: string }>(
        'POST',
        `/v1/admin/webhooks/${endpointId}/deliveries/${deliveryId}/redeliver`,
        key,
      );
    const missing = (what: string, id: string) => ({
      title: `${what} not found`,
      detail: `no ${what.toLowerCase()} ${id} is visible to this key`,
    });
    expect(await redeliver(endpoints.all.id, 'msg_nope', DEMO.admin)).toMatchObject({
      status: 404,
      body: missing('Delivery', 'msg_nope'),
    });
    // A wrong webhook id is "Webhook not found", as on the endpoint's other paths; another tenant's endpoint answers
    // exactly as one that does not exist.
    expect(await redeliver('wh_nope', delivery.id, DEMO.admin)).toMatchObject({
      status: 404,
      body: missing('Webhook', 'wh_nope'),
    });
    expect(await redeliver(endpoints.all.id, delivery.id, otherAdmin)).toMatchObject({
      status: 404,
      body: missing('Webhook', endpoints.all.id),
    });
    expect((await call('GET', `/v1/admin/webhooks/${endpoints.all.id}/deliveries`, otherAdmin)).body).toMatchObject(
      missing('Webhook', endpoints.all.id),
    );
    // Nor through an endpoint of its own: the message is this tenant's, whichever endpoint the path names.
    expect(await redeliver(endpoints.other.id, delivery.id, otherAdmin)).toMatchObject({
      status: 404,
      body: missing('Delivery', delivery.id),
    });
    // Another tenant's delivery id as the cursor of its own log is just a position: it pages its own deliveries only.
    const paged = await call<{ data: DeliveryView[] }>(
      'GET',
      `/v1/admin/webhooks/${endpoints.other.id}/deliveries?cursor=${delivery.id}`,
      otherAdmin,
    );
    expect(paged.status).toBe(200);
    expect(paged.body.data.every((d) => d.payload.data.execution_id !== delivery.payload.data.execution_id)).toBe(true);
    const untouched = (
      await call<{ data: DeliveryView[] }>('GET', `/v1/admin/webhooks/${endpoints.all.id}/deliveries`, DEMO.admin)
    ).body.data.find((d) => d.id === delivery.id)!;
    expect(untouched).toMatchObject({ redeliveries: 1, attempts: 2 });
  });

  it('disables an endpoint after repeated failed deliveries, says so, and stops sending to it', async () => {
    // Every execution so far finished with a delivery to /down that failed all its attempts: two in a row disable it.
    const down = await waitFor(
      async () => (await call<EndpointView>('GET', `/v1/admin/webhooks/${endpoints.down.id}`, DEMO.admin)).body,
      (e) => e.disabled,
    );
    expect(down.disabled_reason).toContain('2 consecutive deliveries failed');
    const notice = await waitFor(
      async () =>
        at('/ok')
          .map(bodyOf)
          .find((b) => b.type === 'webhook.disabled'),
      (b) => b !== undefined,
    );
    expect(notice!.data).toMatchObject({ endpoint_id: endpoints.down.id });
    const downSeen = at('/down').length;
    expect(downSeen).toBe(6);

    const run = await submitAndWait(DEMO.agent, [sms(unique('wh-after-disable'))]);
    // Once the healthy endpoints have this execution's end, the outbox has passed it: /down was not given it.
    await waitFor(
      async () => finishedAt('/ok', run).length + finishedAt('/flaky', run).length,
      (n) => n === 2,
    );
    expect(at('/down')).toHaveLength(downSeen);
    const downLog = await call<{ data: DeliveryView[] }>(
      'GET',
      `/v1/admin/webhooks/${endpoints.down.id}/deliveries`,
      DEMO.admin,
    );
    expect(downLog.body.data.some((d) => d.payload.data.execution_id === run)).toBe(false);
    expect(downLog.body.data.every((d) => d.status === 'failed' && d.attempts === 3)).toBe(true);
    const refused = await call<{ type: string }>(
      'POST',
      `/v1/admin/webhooks/${endpoints.down.id}/deliveries/${downLog.body.data[0].id}/redeliver`,
      DEMO.admin,
    );
    expect(refused.status).toBe(409);
    expect(refused.body.type).toContain('endpoint-disabled');

    const enabled = await call<EndpointView>('POST', `/v1/admin/webhooks/${endpoints.down.id}/enable`, DEMO.admin);
    expect(enabled.status).toBe(200);
    expect(enabled.body).toMatchObject({ disabled: false, disabled_reason: null });

    expect((await call('DELETE', `/v1/admin/webhooks/${endpoints.down.id}`, DEMO.admin)).status).toBe(204);
    expect((await call('GET', `/v1/admin/webhooks/${endpoints.down.id}`, DEMO.admin)).status).toBe(404);
  });

  // An endpoint receives the tenant's events: one added and deleted again must stay on the record, and the record
  // must not become a way to read its signing secret.
  it('the history of admin changes shows each endpoint created, enabled and deleted, by the admin key, never a secret', async () => {
    const admin = (await findActiveKey(stack.db.dataSource.manager, DEMO.admin))!.id;
    const history = (key = DEMO.admin, query = '?kind=webhook_endpoint&limit=200') =>
      call<{ data: EndpointChange[]; next_cursor: string | null }>('GET', `/v1/admin/changes${query}`, key);
    // A refused create (a target off the allowlist) is no change: nothing is recorded.
    const known = (await history()).body.data.map((c) => c.id);
    const refused = await call('POST', '/v1/admin/webhooks', DEMO.admin, {
      url: 'http://10.0.0.5/hook',
      events: ['execution.finished'],
    });
    expect(refused.status).toBe(400);

    const listed = await history();
    expect(listed.status).toBe(200);
    expect(listed.body.data.map((c) => c.id)).toEqual(known);
    const { id, url, events } = endpoints.down;
    const configured = { id, url, events };
    const enabled = { ...configured, disabled: false, disabled_reason: null };
    /** One entry of this endpoint's history, by the admin, with what it changed. */
    const entry = (before: Record<string, unknown> | null, after: Record<string, unknown> | null) => ({
      id: expect.stringMatching(/^chg_/),
      kind: 'webhook_endpoint',
      connector: null,
      endpoint_id: id,
      by: admin,
      at: expect.any(String),
      before,
      after,
    });
    // Newest first: the delete, the enable, the create; the worker's disable in between is no admin's change.
    expect(listed.body.data.filter((c) => c.endpoint_id === id)).toEqual([
      entry(enabled, null),
      entry(
        {
          ...configured,
          disabled: true,
          disabled_reason: expect.stringContaining('2 consecutive deliveries failed'),
        },
        enabled,
      ),
      entry(null, enabled),
    ]);
    // Every entry of this tenant's endpoints, and only those: the three above, then the creates of the other two.
    expect(
      listed.body.data.map((c) => [
        c.endpoint_id,
        c.before === null ? 'created' : c.after === null ? 'deleted' : 'enabled',
      ]),
    ).toEqual([
      [id, 'deleted'],
      [id, 'enabled'],
      [id, 'created'],
      [endpoints.flaky.id, 'created'],
      [endpoints.all.id, 'created'],
    ]);
    const ids = listed.body.data.map((c) => c.id);
    expect(ids).toEqual([...ids].sort().reverse());
    expect((await history(otherAdmin)).body.data.map((c) => c.endpoint_id)).toEqual([endpoints.other.id]);

    // No signing secret — not this endpoint's, not any — in the history, with or without the kind filter.
    const everything = await history(DEMO.admin, '?limit=200');
    expect(everything.body.data.length).toBeGreaterThan(listed.body.data.length);
    expect(secrets.size).toBe(4);
    for (const text of [listed.text, everything.text, (await history(otherAdmin, '?limit=200')).text]) {
      for (const secret of secrets.values()) expect(text).not.toContain(secret);
      expect(text).not.toContain('whsec_');
    }
  });
});
