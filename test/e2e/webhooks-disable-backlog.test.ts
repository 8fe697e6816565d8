import { randomBytes } from 'node:crypto';
import { createServer, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http, HttpResult, sms, submission, unique } from '../support/http';
import type { WireSchemas } from '@verity/sdk';

interface Seen {
  path: string;
  body: { type: string; data: { execution_id?: string } };
}

/** A delivery as the admin API lists it: the wire contract's own type. */
type DeliveryView = WireSchemas['WebhookDelivery'];

/**
 * An event committed while an endpoint is enabled is owed to it, whenever the outbox gets to it: the endpoint's
 * delivery log holds it — as `skipped` when the endpoint was disabled before its turn — so an admin who re-enables the
 * endpoint can see it and redeliver it. The outbox pass used to look only at endpoints enabled at the time of the pass:
 * an event of the last scan interval (or held back by any open transaction on the cluster) before a disable was
 * dropped for that endpoint without a trace.
 */
describe('webhooks: an endpoint disabled while its events wait for the outbox', () => {
  let stack: Stack;
  let server: Server;
  let base = '';
  let port = 0;
  const seen: Seen[] = [];
  /** The answer of the first request to /gate waits for this. */
  let openGate: () => void = () => {};
  const gate = new Promise<void>((resolve) => (openGate = resolve));

  const call = <T>(method: string, path: string, body?: unknown): Promise<HttpResult<T>> =>
    http<T>(stack.apiUrl, method, path, { key: DEMO.admin, body });

  beforeAll(async () => {
    server = createServer((req, res) => {
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString()));
      req.on('end', () => {
        seen.push({ path: req.url ?? '', body: JSON.parse(body) as Seen['body'] });
        if (req.url === '/gate') void gate.then(() => res.writeHead(500).end());
        else res.writeHead(204).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
    base = `http://127.0.0.1:${port}`;
    stack = await Stack.start({
      label: 'whdisable',
      env: {
        SECRETS_KEY: randomBytes(32).toString('base64'),
        WEBHOOK_SCAN_INTERVAL_MS: '100',
        WEBHOOK_BACKOFF_MS: '100',
        WEBHOOK_MAX_ATTEMPTS: '1',
        WEBHOOK_DISABLE_AFTER: '1',
        WEBHOOK_TIMEOUT_MS: '60000',
        SHUTDOWN_GRACE_MS: '65000',
      },
    });
    const put = await call('PUT', '/v1/admin/connector-settings/http', {
      allow_hosts: [{ host: '127.0.0.1', ports: [port], allow_private: true }],
    });
    expect(put.status).toBe(200);
  }, 60_000);

  afterAll(async () => {
    openGate();
    await stack?.stop();
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve));
  });

  it('an event committed before the disable but scanned after it is in the endpoint log (skipped), not dropped', async () => {
    const gated = await call<{ id: string }>('POST', '/v1/admin/webhooks', {
      url: `${base}/gate`,
      events: ['execution.finished'],
    });
    const witness = await call<{ id: string }>('POST', '/v1/admin/webhooks', {
      url: `${base}/ok`,
      events: ['execution.finished'],
    });
    expect([gated.status, witness.status]).toEqual([201, 201]);

    const submit = async () => {
      const created = await http<{ id: string }>(stack.apiUrl, 'POST', '/v1/executions', {
        key: DEMO.agent,
        body: submission([sms(unique('whd'))]),
      });
      expect(created.status).toBe(201);
      return created.body.id;
    };

    // A finishes; its delivery to /gate is on the wire (the receiver holds its answer).
    const a = await submit();
    await waitFor(
      async () => seen.filter((s) => s.path === '/gate' && s.body.data.execution_id === a),
      (found) => found.length > 0,
    );

    // A transaction left open somewhere on the cluster holds the outbox back (never loses its events, by design).
    const runner = stack.db.dataSource.createQueryRunner();
    await runner.connect();
    let b = '';
    try {
      await runner.startTransaction();
      await runner.query('SELECT pg_current_xact_id()');
      // B finishes while the endpoint is still enabled.
      b = await submit();
      await waitFor(
        () => http<{ status: string }>(stack.apiUrl, 'GET', `/v1/executions/${b}`, { key: DEMO.agent }),
        (r) => r.body.status === 'completed',
      );
      expect((await call<{ disabled: boolean }>('GET', `/v1/admin/webhooks/${gated.body.id}`)).body.disabled).toBe(
        false,
      );
      // Then A's delivery fails for good, and the endpoint is disabled (WEBHOOK_DISABLE_AFTER 1).
      openGate();
      await waitFor(
        () => call<{ disabled: boolean }>('GET', `/v1/admin/webhooks/${gated.body.id}`),
        (r) => r.body.disabled,
      );
    } finally {
      await runner.rollbackTransaction().catch(() => undefined);
      await runner.release();
    }

    // The outbox has passed B's event: the witness endpoint, written in the same pass, got it.
    await waitFor(
      async () => seen.filter((s) => s.path === '/ok' && s.body.data.execution_id === b),
      (found) => found.length > 0,
    );
    const log = await call<{ data: DeliveryView[] }>('GET', `/v1/admin/webhooks/${gated.body.id}/deliveries`);
    expect(log.status).toBe(200);
    const forA = log.body.data.filter((d) => d.payload.data.execution_id === a);
    expect(forA.map((d) => d.status)).toEqual(['failed']);
    // B happened while the endpoint was enabled: it is owed to it, and on record (skipped: disabled before its turn).
    const forB = await waitFor(
      async () =>
        (
          await call<{ data: DeliveryView[] }>('GET', `/v1/admin/webhooks/${gated.body.id}/deliveries`)
        ).body.data.filter((d) => d.payload.data.execution_id === b),
      (found) => found.length === 0 || found.every((d) => d.status !== 'pending'),
    );
    expect(forB.map((d) => ({ type: d.type, status: d.status }))).toEqual([
      { type: 'execution.finished', status: 'skipped' },
    ]);
    // It was not sent to the disabled endpoint.
    expect(seen.filter((s) => s.path === '/gate' && s.body.data.execution_id === b)).toEqual([]);
    // And it can be redelivered once the endpoint is enabled again.
    expect((await call('POST', `/v1/admin/webhooks/${gated.body.id}/enable`)).status).toBe(200);
    const redelivered = await call('POST', `/v1/admin/webhooks/${gated.body.id}/deliveries/${forB[0].id}/redeliver`);
    expect(redelivered.status).toBe(202);
    await waitFor(
      async () => seen.filter((s) => s.path === '/gate' && s.body.data.execution_id === b),
      (found) => found.length === 1,
    );
  });
});
