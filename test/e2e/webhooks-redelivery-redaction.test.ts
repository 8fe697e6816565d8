import { Webhook } from 'standardwebhooks';
import { DEMO, Stack, waitFor } from '../support/stack';
import { charge, http, submission, unique } from '../support/http';
import { startReceiver, subscribedReceiver } from './webhook-receiver';

/** Written in plain (in the agent id) before the tenant made it a secret. */
const VALUE = 'agent-tok-Rq84mX2v';

/**
 * A webhook message is redacted with the tenant's secrets as they stand at each attempt, not as they stood at its
 * first: a redelivery after the tenant made a value of it a secret carries the placeholder (the receiver gets two
 * bodies under one `webhook-id`), and each body is signed as it was sent.
 */
describe('webhooks: a redelivery after a value was made a secret', () => {
  let stack: Stack;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;

  beforeAll(async () => {
    receiver = await startReceiver(() => ({ status: 204 }));
    stack = await Stack.start({ label: 'whredact', dispatchers: 0, env: { WEBHOOK_SCAN_INTERVAL_MS: '100' } });
  }, 60_000);

  afterAll(async () => {
    await stack?.stop();
    await receiver?.close();
  });

  it('carries the placeholder where the first delivery had the value, each body verified by its own signature', async () => {
    const endpoint = await subscribedReceiver(stack, receiver.port, `${receiver.base}/hook`, ['execution.finished']);
    const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      headers: { 'idempotency-key': unique('whredact') },
      body: submission([charge(unique('order-whredact'))], { agent_id: VALUE }),
    });
    expect(created.status).toBe(201);
    const cancelled = await http(stack.apiUrl, 'POST', `/v1/executions/${created.body.id}/cancel`, {
      key: DEMO.agent,
      body: { reason: 'ends it' },
    });
    expect(cancelled.status).toBe(200);
    const [first] = await waitFor(
      async () => receiver.seen.filter((r) => r.path === '/hook'),
      (seen) => seen.length === 1,
      30_000,
      100,
    );
    const signer = new Webhook(endpoint.secret);
    const headers = (r: typeof first) => r.headers as Record<string, string>;
    expect(signer.verify(first.body, headers(first))).toMatchObject({ data: { agent_id: VALUE } });
    const [delivery] = await waitFor(endpoint.deliveries, (d) => d.length === 1 && d[0].status === 'delivered');

    const secret = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { secrets: { agent_tok: VALUE } },
    });
    expect(secret.status).toBe(200);
    const redelivered = await http(
      stack.apiUrl,
      'POST',
      `/v1/admin/webhooks/${endpoint.id}/deliveries/${delivery.id}/redeliver`,
      { key: DEMO.admin },
    );
    expect(redelivered.status).toBe(202);
    const [, again] = await waitFor(
      async () => receiver.seen.filter((r) => r.path === '/hook'),
      (seen) => seen.length === 2,
      30_000,
      100,
    );
    // One message (the same webhook-id), two bodies: the second as the tenant's secrets stand now.
    expect(again.headers['webhook-id']).toBe(first.headers['webhook-id']);
    expect(again.body).not.toContain(VALUE);
    expect(again.body).not.toBe(first.body);
    expect(signer.verify(again.body, headers(again))).toMatchObject({
      type: 'execution.finished',
      data: { execution_id: created.body.id, agent_id: '{{secret:agent_tok}}' },
    });
    // The first attempt's signature does not verify the second body: each is signed over exactly what was sent.
    expect(() =>
      signer.verify(again.body, { ...headers(again), 'webhook-signature': headers(first)['webhook-signature'] }),
    ).toThrow();
    // And the delivery log, as the admin API lists it, shows the payload redacted too.
    const listed = await endpoint.deliveries();
    expect(JSON.stringify(listed)).not.toContain(VALUE);
  });
});
