import { randomBytes } from 'node:crypto';
import { createServer, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SecretsCipher } from '@verity/persistence';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http, HttpResult, sms, submission, unique } from '../support/http';
import type { WireSchemas } from '@verity/sdk';

/** A delivery as the admin API lists it: the wire contract's own type. */
type DeliveryView = WireSchemas['WebhookDelivery'];

/**
 * A delivery whose endpoint's signing secret cannot be opened (SECRETS_KEY changed since the endpoint was created)
 * used to throw before any attempt was recorded: it stayed pending for ever, was re-armed every ~30 s with fresh
 * attempts, never failed, never disabled its endpoint, and an admin's redelivery was refused as pending. Each attempt
 * is now recorded as failed with the reason, and the normal path follows: failed after its last attempt, the endpoint
 * disabled. Nothing is sent (nothing could be signed).
 */
describe('webhooks: a signing secret that does not open', () => {
  const KEY = randomBytes(32).toString('base64');
  let stack: Stack;
  let server: Server;
  let base = '';
  const seen: string[] = [];

  const call = <T>(method: string, path: string, body?: unknown): Promise<HttpResult<T>> =>
    http<T>(stack.apiUrl, method, path, { key: DEMO.admin, body });

  beforeAll(async () => {
    server = createServer((req, res) => {
      seen.push(req.url ?? '');
      req.resume().on('end', () => res.writeHead(204).end());
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    base = `http://127.0.0.1:${port}`;
    stack = await Stack.start({
      label: 'whunreadable',
      env: {
        SECRETS_KEY: KEY,
        WEBHOOK_SCAN_INTERVAL_MS: '100',
        WEBHOOK_BACKOFF_MS: '100',
        WEBHOOK_MAX_ATTEMPTS: '2',
        WEBHOOK_DISABLE_AFTER: '1',
      },
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

  it('fails each attempt with the reason, then the delivery, and disables the endpoint; nothing is sent', async () => {
    const created = await call<{ id: string; secret: string }>('POST', '/v1/admin/webhooks', {
      url: `${base}/hook`,
      events: ['execution.finished'],
    });
    expect(created.status).toBe(201);
    // What a changed SECRETS_KEY leaves: a secret sealed with a key the reconciler does not have.
    const other = new SecretsCipher(randomBytes(32).toString('base64'));
    await stack.db.dataSource.query(`UPDATE webhook_endpoints SET secret = $2 WHERE id = $1`, [
      created.body.id,
      other.seal(created.body.secret, 'elsewhere'),
    ]);

    const execution = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([sms(unique('whunreadable'))]),
    });
    expect(execution.status).toBe(201);

    const endpoint = await waitFor(
      () => call<{ disabled: boolean; disabled_reason: string | null }>('GET', `/v1/admin/webhooks/${created.body.id}`),
      (r) => r.body.disabled,
      30_000,
    );
    expect(endpoint.body.disabled_reason).toMatch(/signing secret does not open with this SECRETS_KEY/);
    const log = await call<{ data: DeliveryView[] }>('GET', `/v1/admin/webhooks/${created.body.id}/deliveries`);
    const mine = log.body.data.filter((d) => d.payload.data.execution_id === execution.body.id);
    expect(mine).toEqual([
      expect.objectContaining({
        status: 'failed',
        attempts: 2,
        last_error: expect.stringMatching(/^the endpoint’s signing secret does not open with this SECRETS_KEY/),
      }),
    ]);
    // No key, no secret in what the admin reads.
    for (const text of [log.text, endpoint.text]) {
      expect(text).not.toContain(KEY);
      expect(text).not.toContain(created.body.secret);
    }
    expect(seen).toEqual([]);
  });
});
