import { randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http, sms, submission, unique } from '../support/http';
import { startReceiver, subscribedReceiver } from './webhook-receiver';

/**
 * SIGTERM to the reconciler while a delivery's POST is in flight (the receiver has not answered): the process waits
 * for the attempt (its timeout), records it on the delivery, and exits cleanly; the next reconciler sends the same
 * message again (the same `webhook-id`, each request signed as Standard Webhooks verifies it). Logs at debug level
 * never carry the signing secret.
 */
describe('webhooks: SIGTERM while a delivery is in flight', () => {
  let stack: Stack;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;

  beforeAll(async () => {
    // The first request of each message is answered only after the test (the reconciler's timeout comes first).
    receiver = await startReceiver((_path, attempt) => ({ status: 204, afterMs: attempt === 1 ? 120_000 : 0 }));
    stack = await Stack.start({
      label: 'whsigterm',
      reconcilers: 0,
      env: {
        LOG_LEVEL: 'debug',
        SECRETS_KEY: randomBytes(32).toString('base64'),
        WEBHOOK_SCAN_INTERVAL_MS: '100',
        WEBHOOK_BACKOFF_MS: '100',
        WEBHOOK_MAX_ATTEMPTS: '3',
        WEBHOOK_TIMEOUT_MS: '3000',
      },
    });
  }, 60_000);

  afterAll(async () => {
    await stack?.stop();
    await receiver?.close();
  });

  it('records the attempt before exiting; the next reconciler delivers the same message', async () => {
    const endpoint = await subscribedReceiver(stack, receiver.port, `${receiver.base}/hook`, ['execution.finished']);
    const log = endpoint.deliveries;

    const reconciler = await stack.startApp('reconciler');
    const run = await http(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([sms(unique('wh-sigterm'))]),
    });
    expect(run.status).toBe(201);
    await waitFor(
      async () => receiver.seen.length,
      (n) => n === 1,
      60_000,
    );
    reconciler.child.kill('SIGTERM');
    expect(await reconciler.exited).toBe(0);
    const [recorded] = await log();
    expect(recorded).toMatchObject({ status: 'pending', attempts: 1 });
    expect(recorded.last_error).toMatch(/^ETIMEDOUT/);

    await stack.startApp('reconciler');
    const [delivered] = await waitFor(log, (d) => d[0]?.status === 'delivered', 60_000);
    expect(delivered).toMatchObject({ id: recorded.id, attempts: 2 });
    expect(receiver.seen.map((r) => r.headers['webhook-id'])).toEqual([recorded.id, recorded.id]);
    const wh = new Webhook(endpoint.secret);
    for (const r of receiver.seen) expect(() => wh.verify(r.body, r.headers as Record<string, string>)).not.toThrow();

    const logs = stack.logs();
    expect(logs).toContain('"level":20');
    expect(logs).not.toContain(endpoint.secret.slice('whsec_'.length));
  }, 120_000);
});
