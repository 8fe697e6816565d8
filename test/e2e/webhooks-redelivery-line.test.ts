import { JobName, webhookDeliveryJob } from '@verity/queues';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http, sms, submission, unique } from '../support/http';
import { startReceiver, subscribedReceiver } from './webhook-receiver';

/**
 * An admin's redeliveries take their places in the tenant's own line, one behind another, as the outbox's deliveries
 * do: each was enqueued first in the line (priority 1), so an admin (or a script) redelivering hundreds of messages at
 * once put every one of them before another tenant's first waiting delivery, which every tenant's first is promised
 * to precede. No reconciler runs while they are asked for, so the jobs wait in Redis as the API enqueued them.
 */
describe('webhooks: redeliveries in their tenant’s line', () => {
  let stack: Stack;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;

  beforeAll(async () => {
    receiver = await startReceiver(() => ({ status: 204 }));
    stack = await Stack.start({ label: 'whredline', env: { WEBHOOK_SCAN_INTERVAL_MS: '100' } });
  }, 60_000);

  afterAll(async () => {
    await stack?.stop();
    await receiver?.close();
  });

  it('are scheduled one behind another (1, 2, 3), not all first', async () => {
    const endpoint = await subscribedReceiver(stack, receiver.port, `${receiver.base}/hook`, ['operation.settled']);
    const run = await http(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([0, 1, 2].map((i) => sms(unique(`wh-line-${i}`), { key: `sms${i}` }))),
    });
    expect(run.status).toBe(201);
    const delivered = await waitFor(
      endpoint.deliveries,
      (d) => d.length === 3 && d.every((x) => x.status === 'delivered'),
      60_000,
    );
    for (const reconciler of stack.running('reconciler')) await stack.kill(reconciler, 'SIGTERM');

    for (const d of delivered) {
      const redelivered = await http(
        stack.apiUrl,
        'POST',
        `/v1/admin/webhooks/${endpoint.id}/deliveries/${d.id}/redeliver`,
        { key: DEMO.admin },
      );
      expect(redelivered.status).toBe(202);
    }
    const { producer } = await stack.queues();
    const priorities: number[] = [];
    for (const d of delivered) {
      const data = { deliveryId: d.id, round: 1 };
      const { jobId } = webhookDeliveryJob(d.id, 1, { attempts: 1, backoffMs: 100 }, 1).options;
      const job = await (await producer.queueOf(JobName.DELIVER_WEBHOOK, data)).getJob(jobId!);
      priorities.push(job!.opts.priority ?? 0);
    }
    expect(priorities).toEqual([1, 2, 3]);
  }, 90_000);
});
