import { randomBytes } from 'node:crypto';
import { AddressInfo, createServer, Socket } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http, sms, submission, unique } from '../support/http';
import type { WireSchemas } from '@verity/sdk';

interface Request {
  path: string;
  headers: Record<string, string>;
  body: string;
}

/** A delivery as the admin API lists it: the wire contract's own type. */
type DeliveryView = WireSchemas['WebhookDelivery'];

/** What each path of the receiver does once it has read a whole request (raw TCP: it may break HTTP as it likes). */
const BEHAVIOURS: Record<string, (socket: Socket, every: (ms: number, write: () => void) => void) => void> = {
  // Slowloris: a status line, then a header line now and then, never the end of the headers.
  '/slowloris': (socket, every) => {
    socket.write('HTTP/1.1 200 OK\r\n');
    every(50, () => socket.write('x-wait: more\r\n'));
  },
  // A 2xx whose body never ends (and names what must never be shown).
  '/endless': (socket, every) => {
    socket.write('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n');
    every(5, () => socket.write(`4000\r\n${'RESPONSEBODY'.repeat(1365)}abcd\r\n`));
  },
  '/huge-header': (socket) => socket.write(`HTTP/1.1 500 Oops\r\nx-big: ${'h'.repeat(200_000)}\r\n\r\n`),
  '/reset': (socket) => socket.resetAndDestroy(),
  '/close': (socket) => socket.end(),
  '/redirect-metadata': (socket) =>
    socket.write('HTTP/1.1 302 Found\r\nlocation: http://169.254.169.254/latest\r\ncontent-length: 0\r\n\r\n'),
  '/429': (socket) =>
    socket.write('HTTP/1.1 429 Too Many\r\nretry-after: 3600\r\ncontent-length: 12\r\n\r\nRESPONSEBODY'),
  '/switching': (socket) =>
    socket.write('HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n'),
  // Informational answers, one after another, never a final one.
  '/processing': (socket, every) => every(50, () => socket.write('HTTP/1.1 102 Processing\r\n\r\n')),
  '/garbage': (socket) => socket.write('NOT HTTP AT ALL\r\n\r\n'),
};

/** A receiver on loopback that reads each request whole, notes it, and then misbehaves as its path says. */
async function startHostileReceiver() {
  const seen: Request[] = [];
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    let buffer = Buffer.alloc(0);
    socket.on('data', (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      const end = buffer.indexOf('\r\n\r\n');
      if (end < 0) return;
      const [requestLine, ...lines] = buffer.subarray(0, end).toString().split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of lines) {
        const colon = line.indexOf(':');
        headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
      }
      const length = Number(headers['content-length'] ?? 0);
      if (buffer.length < end + 4 + length) return;
      const body = buffer.subarray(end + 4, end + 4 + length).toString();
      buffer = Buffer.alloc(0);
      const path = requestLine.split(' ')[1];
      seen.push({ path, headers, body });
      const every = (ms: number, write: () => void) => {
        const timer = setInterval(() => (socket.writable ? write() : clearInterval(timer)), ms);
        timers.add(timer);
      };
      const behaviour = BEHAVIOURS[path];
      if (behaviour) behaviour(socket, every);
      else socket.write('HTTP/1.1 204 No Content\r\n\r\n');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    seen,
    sockets,
    close: async () => {
      for (const timer of timers) clearInterval(timer);
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/**
 * Receivers that hang, stream without end, overflow the headers, reset, close, redirect to a metadata address, answer
 * 429 with a long Retry-After, switch protocols or send only informational answers: each attempt ends by its timeout
 * or at once, each delivery settles (the 2xx one delivered on its first attempt), the log shows no response body, the
 * reconciler keeps no connection open, and a well-behaved endpoint of the same tenant is served beside them.
 */
describe('webhooks: hostile receivers', () => {
  let stack: Stack;
  let receiver: Awaited<ReturnType<typeof startHostileReceiver>>;

  beforeAll(async () => {
    receiver = await startHostileReceiver();
    stack = await Stack.start({
      label: 'wh-hostile',
      env: {
        SECRETS_KEY: randomBytes(32).toString('base64'),
        WEBHOOK_SCAN_INTERVAL_MS: '100',
        WEBHOOK_BACKOFF_MS: '100',
        WEBHOOK_MAX_ATTEMPTS: '2',
        WEBHOOK_TIMEOUT_MS: '1500',
        WEBHOOK_DISABLE_AFTER: '100',
      },
    });
  }, 60_000);

  afterAll(async () => {
    await stack?.stop();
    await receiver?.close();
  });

  it('ends every attempt, settles every delivery, and shows no response body', async () => {
    const allow = await http(stack.apiUrl, 'PUT', '/v1/admin/connector-settings/http', {
      key: DEMO.admin,
      body: { allow_hosts: [{ host: '127.0.0.1', ports: [receiver.port], allow_private: true }] },
    });
    expect(allow.status).toBe(200);
    const endpoints = new Map<string, { id: string; secret: string }>();
    for (const path of [...Object.keys(BEHAVIOURS), '/ok']) {
      const created = await http<{ id: string; secret: string }>(stack.apiUrl, 'POST', '/v1/admin/webhooks', {
        key: DEMO.admin,
        body: { url: `http://127.0.0.1:${receiver.port}${path}`, events: ['execution.finished'] },
      });
      expect(created.status).toBe(201);
      endpoints.set(path, created.body);
    }
    const run = await http(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([sms(unique('wh-hostile'))]),
    });
    expect(run.status).toBe(201);

    const settled = new Map<string, DeliveryView>();
    for (const [path, endpoint] of endpoints) {
      const log = await waitFor(
        async () =>
          (
            await http<{ data: DeliveryView[] }>(stack.apiUrl, 'GET', `/v1/admin/webhooks/${endpoint.id}/deliveries`, {
              key: DEMO.admin,
            })
          ).body.data,
        (data) => data.length === 1 && data[0].status !== 'pending',
        30_000,
      );
      settled.set(path, log[0]);
    }
    const view = (path: string) => {
      const d = settled.get(path)!;
      return { status: d.status, attempts: d.attempts, answered: d.last_response_status, error: d.last_error };
    };
    const timedOut = { status: 'failed', attempts: 2, answered: null, error: 'ETIMEDOUT: no answer within 1500 ms' };
    expect(view('/slowloris')).toEqual(timedOut);
    // A 101 ends the exchange with its status (the connection, which speaks another protocol now, is closed): the
    // endpoint answered, not with a 2xx. Until 2026-12-07 the exchange waited for its timeout after Node dropped the
    // socket.
    expect(view('/switching')).toEqual({
      status: 'failed',
      attempts: 2,
      answered: 101,
      error: 'the endpoint answered 101',
    });
    expect(view('/processing')).toEqual(timedOut);
    expect(view('/endless')).toEqual({ status: 'delivered', attempts: 1, answered: 200, error: null });
    expect(view('/ok')).toEqual({ status: 'delivered', attempts: 1, answered: 204, error: null });
    expect(view('/huge-header')).toMatchObject({ status: 'failed', attempts: 2, answered: null });
    expect(view('/huge-header').error).toMatch(/^HPE_HEADER_OVERFLOW/);
    expect(view('/reset')).toMatchObject({ status: 'failed', attempts: 2, answered: null });
    expect(view('/close')).toMatchObject({ status: 'failed', attempts: 2, answered: null });
    expect(view('/garbage')).toMatchObject({ status: 'failed', attempts: 2, answered: null });
    expect(view('/redirect-metadata')).toEqual({
      status: 'failed',
      attempts: 2,
      answered: 302,
      error: 'the endpoint answered 302',
    });
    expect(view('/429')).toEqual({ status: 'failed', attempts: 2, answered: 429, error: 'the endpoint answered 429' });
    for (const d of settled.values()) {
      expect(d.last_error ?? '').not.toMatch(/RESPONSEBODY|hhhh/);
      expect((d.last_error ?? '').length).toBeLessThan(200);
    }

    // Every request was a signed one, each retry with its message's webhook-id (a retry after a timeout, or after a
    // reset, is the same message to de-duplicate).
    for (const request of receiver.seen) {
      new Webhook(endpoints.get(request.path)!.secret).verify(request.body, request.headers);
    }
    for (const path of Object.keys(BEHAVIOURS).filter((p) => p !== '/endless')) {
      const ids = receiver.seen.filter((r) => r.path === path).map((r) => r.headers['webhook-id']);
      expect(ids).toHaveLength(2);
      expect(new Set(ids).size).toBe(1);
    }
    // The reconciler let go of every connection, also the endless 2xx stream and the ones it gave up on.
    await waitFor(
      async () => receiver.sockets.size,
      (open) => open === 0,
    );
  }, 90_000);
});
