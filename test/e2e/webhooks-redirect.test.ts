import { randomBytes } from 'node:crypto';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http, sms, submission, unique } from '../support/http';
import { startReceiver, subscribedReceiver } from './webhook-receiver';

/**
 * A receiver that answers a delivery with a redirect is not followed: the address it names (here one on the allowlist,
 * so only "never follow" keeps it from being called; an internal address would be the attack) is never called, and
 * the delivery is a failed one (its status is the redirect's), retried and then failed like any other non-2xx.
 */
describe('webhooks: a redirect at delivery time', () => {
  let stack: Stack;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;

  beforeAll(async () => {
    receiver = await startReceiver((path) =>
      path === '/redirect'
        ? { status: 307, headers: { location: `http://127.0.0.1:${receiver.port}/canary` } }
        : { status: 204 },
    );
    stack = await Stack.start({
      label: 'wh-redirect',
      env: {
        SECRETS_KEY: randomBytes(32).toString('base64'),
        WEBHOOK_SCAN_INTERVAL_MS: '100',
        WEBHOOK_BACKOFF_MS: '100',
        WEBHOOK_MAX_ATTEMPTS: '2',
      },
    });
  }, 60_000);

  afterAll(async () => {
    await stack?.stop();
    await receiver?.close();
  });

  it('is not followed: the delivery fails with the redirect status, the address it names is never called', async () => {
    const endpoint = await subscribedReceiver(stack, receiver.port, `${receiver.base}/redirect`, [
      'execution.finished',
    ]);
    const run = await http(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([sms(unique('wh-redirect'))]),
    });
    expect(run.status).toBe(201);

    const failed = await waitFor(
      async () => (await endpoint.deliveries())[0],
      (d) => d?.status === 'failed',
    );
    expect(failed).toMatchObject({ status: 'failed', attempts: 2, last_response_status: 307 });
    expect(receiver.seen.filter((r) => r.path === '/redirect')).toHaveLength(2);
    expect(receiver.seen.filter((r) => r.path === '/canary')).toEqual([]);
  });
});
