import { createServer, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http, HttpResult, sms, submission, unique } from '../support/http';
import type { WireSchemas } from '@verity/sdk';

/** A delivery as the admin API lists it: the wire contract's own type. */
type DeliveryView = WireSchemas['WebhookDelivery'];

/**
 * The reconciler's sweep prunes the webhook delivery log: a settled delivery whose last change is older than
 * WEBHOOK_DELIVERY_RETENTION_MS leaves the log; a pending one and a recent one stay.
 */
describe('webhooks: the delivery log is pruned by the sweep', () => {
  let stack: Stack;
  let server: Server;
  let base = '';

  const call = <T>(method: string, path: string, body?: unknown): Promise<HttpResult<T>> =>
    http<T>(stack.apiUrl, method, path, { key: DEMO.admin, body });

  beforeAll(async () => {
    server = createServer((req, res) => req.resume().on('end', () => res.writeHead(204).end()));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    base = `http://127.0.0.1:${port}`;
    stack = await Stack.start({
      label: 'whretention',
      dispatchers: 1,
      env: { WEBHOOK_SCAN_INTERVAL_MS: '100', WEBHOOK_DELIVERY_RETENTION_MS: String(24 * 60 * 60 * 1000) },
    });
    const put = await call('PUT', '/v1/admin/connector-settings/http', {
      allow_hosts: [{ host: '127.0.0.1', ports: [port], allow_private: true }],
    });
    expect(put.status).toBe(200);
  }, 60_000);

  afterAll(async () => {
    await stack?.stop();
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve));
  });

  it('deletes a delivered delivery past the retention, keeps a pending one as old and a recent one', async () => {
    const created = await call<{ id: string }>('POST', '/v1/admin/webhooks', {
      url: `${base}/hook`,
      events: ['execution.finished'],
    });
    expect(created.status).toBe(201);
    const log = () => call<{ data: DeliveryView[] }>('GET', `/v1/admin/webhooks/${created.body.id}/deliveries`);
    const ids: string[] = [];
    for (let i = 0; i < 3; i += 1) {
      const execution = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: submission([sms(unique('whretention'))]),
      });
      expect(execution.status).toBe(201);
      ids.push(execution.body.id);
    }
    const delivered = await waitFor(log, (r) => r.body.data.filter((d) => d.status === 'delivered').length === 3);
    const [old, pending, recent] = ids.map(
      (x) => delivered.body.data.find((d) => d.payload.data.execution_id === x)!.id,
    );
    await stack.db.dataSource.query(
      `UPDATE webhook_deliveries SET updated_at = now() - interval '2 days',
              status = CASE WHEN id = $2 THEN 'pending' ELSE status END
        WHERE id = ANY($1)`,
      [[old, pending], pending],
    );
    // The pending one is owed: it stays however old (sent again later, it is settled anew, and recent).
    await waitFor(log, (r) => !r.body.data.some((d) => d.id === old), 30_000);
    const after = (await log()).body.data.map((d) => d.id);
    expect(after).toEqual(expect.arrayContaining([pending, recent]));
  });
});
