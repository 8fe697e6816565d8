import { createServer, IncomingHttpHeaders, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { WireSchemas } from '@verity/sdk';
import { http } from '../support/http';
import { DEMO, Stack } from '../support/stack';
import { allowLoopbackPort } from './connectors-support';

export interface Received {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  answered: number;
}

/**
 * A webhook receiver on loopback for the tests: every request is noted in arrival order, and `answer` decides, per
 * path and attempt of the same message (`webhook-id`), the status and how long to take before giving it.
 */
export async function startReceiver(
  answer: (path: string, attempt: number) => { status: number; afterMs?: number; headers?: Record<string, string> },
): Promise<{ base: string; port: number; seen: Received[]; close(): Promise<void> }> {
  const seen: Received[] = [];
  const attemptsById = new Map<string, number>();
  // Answers not given yet: cleared on close, so a receiver told to hang keeps no timer alive after it.
  const pending = new Set<NodeJS.Timeout>();
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      const path = req.url ?? '';
      const id = String(req.headers['webhook-id']);
      const attempt = (attemptsById.get(`${path}|${id}`) ?? 0) + 1;
      attemptsById.set(`${path}|${id}`, attempt);
      const { status, afterMs = 0, headers = {} } = answer(path, attempt);
      seen.push({ path, headers: req.headers, body, answered: status });
      if (afterMs > 0) {
        const timer = setTimeout(() => {
          pending.delete(timer);
          res.writeHead(status, headers).end();
        }, afterMs);
        pending.add(timer);
      } else res.writeHead(status, headers).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    base: `http://127.0.0.1:${port}`,
    port,
    seen,
    close: async () => {
      for (const timer of pending) clearTimeout(timer);
      pending.clear();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** A delivery as the admin API lists it: the wire contract's own type. */
export type DeliveryView = WireSchemas['WebhookDelivery'];

/**
 * The demo tenant's admin subscribes `url` — a receiver on loopback `port`, allowlisted first (allowLoopbackPort) — to
 * `events`: the endpoint as created (201), and `deliveries()`, its delivery log as the admin API lists it.
 */
export async function subscribedReceiver(stack: Stack, port: number, url: string, events: string[]) {
  await allowLoopbackPort(stack, port);
  const created = await http<{ id: string; secret: string }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
    key: DEMO.admin,
    body: { url, events },
  });
  expect(created.status).toBe(201);
  const deliveries = async () =>
    (
      await http<{ data: DeliveryView[] }>(stack.apiUrl, 'GET', `/v1/admin/webhooks/${created.body.id}/deliveries`, {
        key: DEMO.admin,
      })
    ).body.data;
  return { ...created.body, deliveries };
}
