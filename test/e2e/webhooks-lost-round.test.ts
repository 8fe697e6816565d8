import { randomBytes } from 'node:crypto';
import { jobId, JobName, QueueName } from '@verity/queues';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http, HttpResult, sms, submission, unique } from '../support/http';
import { stackQueue } from './dispatcher-helpers';
import { startReceiver } from './webhook-receiver';
import type { WireSchemas } from '@verity/sdk';

/** A delivery as the admin API lists it: the wire contract's own type. */
type DeliveryView = WireSchemas['WebhookDelivery'];

/**
 * A delivery whose job ended for good without recording its attempt (the database refused the write each time) stays
 * `pending`: it is owed. The reconciler's pass over owed deliveries must send it again — BullMQ keeps the failed job
 * (a day) under the round's job id, so a plain add of that id does nothing — and an admin, who is told
 * `409 delivery-pending` meanwhile, must not be left with a message nobody will ever send.
 */
describe('webhooks: a round whose job ended without recording it', () => {
  let stack: Stack;
  const receiver = startReceiver(() => ({ status: 204 }));

  const call = <T>(method: string, path: string, key: string, body?: unknown): Promise<HttpResult<T>> =>
    http<T>(stack.apiUrl, method, path, { key, body });

  beforeAll(async () => {
    const { port } = await receiver;
    stack = await Stack.start({
      label: 'webhooks-lost-round',
      env: {
        SECRETS_KEY: randomBytes(32).toString('base64'),
        WEBHOOK_SCAN_INTERVAL_MS: '100',
        WEBHOOK_MAX_ATTEMPTS: '1',
        WEBHOOK_TIMEOUT_MS: '2000',
      },
    });
    const put = await call('PUT', '/v1/admin/connector-settings/http', DEMO.admin, {
      allow_hosts: [{ host: '127.0.0.1', ports: [port], allow_private: true }],
    });
    expect(put.status).toBe(200);
  }, 60_000);

  afterAll(async () => {
    await stack?.stop();
    await (await receiver).close();
  });

  it('is sent again by the pass over owed deliveries, and then settles', async () => {
    const { base, seen } = await receiver;
    const created = await call<{ id: string }>('POST', '/v1/admin/webhooks', DEMO.admin, {
      url: `${base}/ok`,
      events: ['execution.finished'],
    });
    expect(created.status).toBe(201);
    const endpointId = created.body.id;
    const deliveries = async () =>
      (await call<{ data: DeliveryView[] }>('GET', `/v1/admin/webhooks/${endpointId}/deliveries`, DEMO.admin)).body
        .data;

    // Every record of an attempt is refused (as by a database that fails each time the worker writes).
    await stack.db.dataSource.query(
      `ALTER TABLE webhook_deliveries ADD CONSTRAINT test_no_attempt_recorded CHECK (attempts < 1) NOT VALID`,
    );
    const run = await call<{ id: string }>('POST', '/v1/executions', DEMO.agent, submission([sms(unique('lost'))]));
    expect(run.status).toBe(201);
    const delivery = (await waitFor(
      async () => (await deliveries()).find((d) => d.payload.data.execution_id === run.body.id),
      (d) => d !== undefined,
    ))!;
    // The receiver has it, and the job has ended (failed, its one attempt spent) with nothing recorded.
    const queue = stackQueue(stack, QueueName.WEBHOOKS);
    try {
      await waitFor(
        async () => (await (await queue.getJob(jobId(JobName.DELIVER_WEBHOOK, delivery.id, 0)))?.isFailed()) ?? false,
        (failed) => failed,
      );
    } finally {
      await queue.close();
    }
    expect(seen.filter((r) => r.headers['webhook-id'] === delivery.id)).toHaveLength(1);
    await stack.db.dataSource.query(`ALTER TABLE webhook_deliveries DROP CONSTRAINT test_no_attempt_recorded`);
    expect((await deliveries()).find((d) => d.id === delivery.id)).toMatchObject({ status: 'pending', attempts: 0 });

    // Owed: an admin is told it is still to be sent...
    const redelivered = await call<{ type: string }>(
      'POST',
      `/v1/admin/webhooks/${endpointId}/deliveries/${delivery.id}/redeliver`,
      DEMO.admin,
    );
    expect(redelivered.status).toBe(409);
    expect(redelivered.body.type).toContain('delivery-pending');
    // ...and it is: the pass over owed deliveries (those untouched for 30 s) sends it again.
    const settled = await waitFor(
      async () => (await deliveries()).find((d) => d.id === delivery.id)!,
      (d) => d.status === 'delivered',
      75_000,
      500,
    );
    expect(settled).toMatchObject({ attempts: 1, redeliveries: 0 });
    expect(seen.filter((r) => r.headers['webhook-id'] === delivery.id)).toHaveLength(2);
  }, 120_000);
});
