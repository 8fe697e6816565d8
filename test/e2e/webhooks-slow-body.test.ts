import { randomBytes } from 'node:crypto';
import { createServer, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http, sms, submission, unique } from '../support/http';
import { subscribedReceiver } from './webhook-receiver';

/**
 * A delivery succeeds on a 2xx status (Standard Webhooks; docs/api.md "A 2xx answer is success"). A receiver that
 * answered 200 at once but whose response body then took longer than WEBHOOK_TIMEOUT_MS (a framework streaming a page,
 * a proxy holding the connection) was recorded as "no answer within …", failed, sent again and counted towards
 * disabling the endpoint, though it had taken the message. The status decides; the body is not waited for.
 */
describe('a webhook receiver whose 2xx body is slow', () => {
  let stack: Stack;
  let server: Server;
  let port = 0;
  const received: string[] = [];
  const timers = new Set<NodeJS.Timeout>();

  beforeAll(async () => {
    server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        received.push(String(req.headers['webhook-id']));
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.write('ok');
        // The rest of the body comes 15 s later: three times the delivery timeout (a timeout of 1 s was passed before the
        // status itself arrived, on a loaded machine: a second attempt, not what this case is about).
        const timer = setTimeout(() => {
          timers.delete(timer);
          res.end(' and more');
        }, 15_000);
        timers.add(timer);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
    stack = await Stack.start({
      label: 'webhooks-slow-body',
      env: {
        SECRETS_KEY: randomBytes(32).toString('base64'),
        WEBHOOK_SCAN_INTERVAL_MS: '100',
        WEBHOOK_BACKOFF_MS: '100',
        WEBHOOK_MAX_ATTEMPTS: '3',
        WEBHOOK_TIMEOUT_MS: '5000',
      },
    });
  }, 120_000);

  afterAll(async () => {
    await stack?.stop();
    for (const timer of timers) clearTimeout(timer);
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve));
  });

  it('is delivered on its first attempt, recorded with the status it answered', async () => {
    const endpoint = await subscribedReceiver(stack, port, `http://127.0.0.1:${port}/hook`, ['execution.finished']);
    const run = await http(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([sms(unique('slow-body'))]),
    });
    expect(run.status).toBe(201);
    const [delivery] = await waitFor(
      endpoint.deliveries,
      (data) => data.length === 1 && data[0].status !== 'pending',
      30_000,
      100,
    );
    expect(delivery).toMatchObject({ status: 'delivered', attempts: 1, last_response_status: 200, last_error: null });
    expect(received).toHaveLength(1);
  });
});
