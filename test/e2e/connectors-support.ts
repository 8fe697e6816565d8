/**
 * Shared by the connectors-* end-to-end tests: a real HTTP server on loopback standing in for an arbitrary third-party
 * API (with a read-back endpoint, a slow endpoint, a rejecting one and a redirect), a canary that must never be
 * reached, and a recording client so a test can grep everything the API answered.
 */
import { createServer, IncomingMessage, Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DEMO, Stack, waitFor } from '../support/stack';
import { http, HttpResult, submission } from '../support/http';
import type { Execution } from '@verity/sdk';
import { waitForApprovalRequest } from './dispatcher-helpers';
export type { Operation as Op, Execution } from '@verity/sdk';

export interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

export interface TargetServer {
  base: string;
  port: number;
  seen: Seen[];
  /** What GET /state/<name> answers: `{data: {value}}`, or a 503 while it is 'unavailable'; after `delayMs`. */
  setState(name: string, value: string, delayMs?: number): void;
  /**
   * GET /state/<name> answers `value` only once the returned release is called: a read the test holds open while it
   * changes something under it (a fixed delay is outlasted by a loaded machine).
   */
  holdState(name: string, value: string): () => void;
  close(): Promise<void>;
}

async function listen(server: Server, host: string): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, resolve);
  });
  return (server.address() as AddressInfo).port;
}

async function closeServer(server: Server): Promise<void> {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
}

/**
 * POST /orders and /slow-orders record `{ id }` (the slow one answers only after `slowMs`, after recording it);
 * GET /orders/:id reads it back as `{ data: { status: 'created' } }` or 404, GET /records/:id as `{ data: { id,
 * attributes: null } }` or `{ data: null }`; /reject answers 422; /redirect answers
 * 302 to `redirectTo`.
 */
export async function startTarget(options: { slowMs?: number; redirectTo?: string } = {}): Promise<TargetServer> {
  const seen: Seen[] = [];
  const orders = new Map<string, { status: string }>();
  const states = new Map<string, { value: string; delayMs: number; released?: Promise<void> }>();
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
      const json = (status: number, value: unknown) => {
        if (res.destroyed) return;
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(value));
      };
      const path = req.url ?? '';
      if (req.method === 'POST' && (path === '/orders' || path === '/slow-orders')) {
        const id = (JSON.parse(body || '{}') as { id?: string }).id ?? 'none';
        orders.set(id, { status: 'created' });
        // The effect exists before the answer: a client that times out does not know it happened.
        if (path === '/slow-orders') return setTimeout(() => json(201, { id }), options.slowMs ?? 3000).unref();
        return json(201, { id, echo: req.headers.authorization ?? null });
      }
      if (req.method === 'GET' && path.startsWith('/orders/')) {
        const order = orders.get(decodeURIComponent(path.slice('/orders/'.length)));
        return order ? json(200, { data: order }) : json(404, { error: { code: 'not_found' } });
      }
      if (req.method === 'GET' && path.startsWith('/records/')) {
        // An API that answers a record whose attributes are not filled in yet (`null`), and `{"data": null}` for none.
        const id = decodeURIComponent(path.slice('/records/'.length));
        return json(200, { data: orders.has(id) ? { id, attributes: null } : null });
      }
      if (req.method === 'GET' && path.startsWith('/state/')) {
        const state = states.get(decodeURIComponent(path.slice('/state/'.length)));
        if (!state) return json(404, { error: { code: 'not_found' } });
        const answer = () =>
          state.value === 'unavailable'
            ? json(503, { error: { code: 'unavailable' } })
            : json(200, { data: { value: state.value } });
        if (state.released) return void state.released.then(answer);
        return state.delayMs > 0 ? setTimeout(answer, state.delayMs).unref() : answer();
      }
      // A search that finds nothing (or, lagging, nothing yet): 200 with an empty list.
      if (req.method === 'GET' && path.startsWith('/search?')) return json(200, { data: [], total: 0 });
      if (path === '/reject') return json(422, { error: { code: 'invalid_order', message: 'no such product' } });
      if (path === '/redirect') {
        res.writeHead(302, { location: options.redirectTo ?? '/orders' });
        return res.end();
      }
      return json(404, { error: { code: 'no_route' } });
    });
  });
  const port = await listen(server, '127.0.0.1');
  return {
    base: `http://127.0.0.1:${port}`,
    port,
    seen,
    setState: (name, value, delayMs = 0) => states.set(name, { value, delayMs }),
    holdState: (name, value) => {
      let release = () => {};
      const released = new Promise<void>((resolve) => (release = resolve));
      states.set(name, { value, delayMs: 0, released });
      return () => release();
    },
    close: () => closeServer(server),
  };
}

/** A listener on every loopback address (IPv4 and IPv6 when available) that counts any connection it gets. */
export async function startCanary(): Promise<{ port: number; hits: () => number; close(): Promise<void> }> {
  let connections = 0;
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"data":{"status":"created"}}');
  });
  server.on('connection', () => (connections += 1));
  let port: number;
  try {
    // Dual-stack: 127.0.0.1, ::1, ::ffff:127.0.0.1 and 0.0.0.0 all land here.
    port = await listen(server, '::');
  } catch {
    port = await listen(server, '0.0.0.0');
  }
  return { port, hits: () => connections, close: () => closeServer(server) };
}

/** A client that keeps every answer the API gave, so a test can check none of them ever held a secret. */
export function recordingClient(stack: Stack, defaultKey = DEMO.agent) {
  const answers: string[] = [];
  const call = async <T>(
    method: string,
    path: string,
    options: { key?: string; body?: unknown; headers?: Record<string, string> } = {},
  ): Promise<HttpResult<T>> => {
    const result = await http<T>(stack.apiUrl, method, path, { key: defaultKey, ...options });
    answers.push(`${method} ${path} ${result.status} ${JSON.stringify([...result.headers])} ${result.text}`);
    return result;
  };
  return { call, answers };
}

export type Call = ReturnType<typeof recordingClient>['call'];

export async function submitOps(call: Call, operations: unknown[]): Promise<Execution> {
  const created = await call<Execution>('POST', '/v1/executions', { body: submission(operations) });
  if (created.status !== 201) throw new Error(`submit answered ${created.status}: ${created.text}`);
  return created.body;
}

export async function settled(call: Call, id: string, timeoutMs = 45_000): Promise<Execution> {
  return waitFor(
    async () => (await call<Execution>('GET', `/v1/executions/${id}`)).body,
    (e) => ['completed', 'failed', 'cancelled', 'expired'].includes(e.status),
    timeoutMs,
    150,
  );
}

export function httpOp(key: string, params: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  return { key, connector: 'http', action: 'request', params, ...extra };
}

/**
 * The tenant's `http` connector may call `port` on loopback (allowlisted explicitly, with `host` besides in its entry:
 * the secrets it may carry), with `extra` settings besides: as the admin, through `via` (a test's recording client, or
 * the stack's API).
 */
export async function allowLoopbackPort(
  via: Call | Stack,
  port: number,
  extra: Record<string, unknown> = {},
  host: Record<string, unknown> = {},
): Promise<void> {
  const call = via instanceof Stack ? recordingClient(via).call : via;
  const settings = await call('PUT', '/v1/admin/connector-settings/http', {
    key: DEMO.admin,
    body: { allow_hosts: [{ host: '127.0.0.1', ports: [port], allow_private: true, ...host }], ...extra },
  });
  expect(settings.status).toBe(200);
}

/** The tenant's policy: an `http` operation whose `body.amount` is above 50 waits for approval. */
export async function approvalAboveFifty(call: Call): Promise<void> {
  const policy = await call('PUT', '/v1/admin/policy', {
    key: DEMO.admin,
    body: { approval_rules: [{ connector: 'http', amount_above: 50, amount_field: 'body.amount' }] },
  });
  expect(policy.status).toBe(200);
}

/**
 * An execution of one operation that was accepted (201) and waits for approval; `meanwhile` runs then (a test writes
 * into the stored row what one accepted before a rule may hold), and a reviewer denies it: its retry is the next
 * decision. The operation's id.
 */
export async function deniedAfter(
  call: Call,
  accepted: HttpResult<unknown>,
  meanwhile: (operationId: string) => Promise<unknown>,
): Promise<string> {
  expect(accepted.status).toBe(201);
  const execution = accepted.body as { id: string; operations: { id: string }[] };
  const opId = execution.operations[0].id;
  await waitFor(
    async () => (await call<{ status: string }>('GET', `/v1/executions/${execution.id}`)).body.status,
    (status) => status === 'waiting_for_approval',
  );
  await meanwhile(opId);
  const denied = await call('POST', `/v1/operations/${opId}/approval`, {
    key: DEMO.reviewer,
    body: { decision: 'deny' },
  });
  expect(denied.status).toBe(200);
  return opId;
}

/**
 * A target of the http connector on loopback whose sends never succeed (500: an order whose outcome is unknown, so it is
 * held for review) and whose reads answer 503 (the source unreachable) until `holdReads` is set: from then on each read
 * is held in `heldReads` until the test answers it, so a reviewer's read can be made to end after another decision.
 * With `readsDown` cleared (and nothing held), a read answers 404 (no such order). `close` answers what is still held
 * (503) and stops the server.
 */
export async function orderTargetHoldingReads() {
  const heldReads: ServerResponse[] = [];
  const target = { holdReads: false, readsDown: true };
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.method === 'POST') {
        res.writeHead(500, { 'content-type': 'application/json' });
        return res.end('{"error":{"code":"internal"}}');
      }
      if (target.holdReads) return void heldReads.push(res);
      if (!target.readsDown) {
        res.writeHead(404, { 'content-type': 'application/json' });
        return res.end('{}');
      }
      res.writeHead(503, { 'content-type': 'application/json' });
      res.end('{"error":{"code":"maintenance"}}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    heldReads,
    target,
    async close() {
      for (const res of heldReads.splice(0)) if (!res.writableEnded) res.writeHead(503).end('{}');
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/**
 * `count` executions of one http request to `target` waiting for approval, each ~60 KB of body (6 strings of 10 000
 * characters, the longest a string may be; an http body takes 64 KiB of JSON): 30 of them are well past a page's 1 MiB.
 * The operations' ids, oldest first, once every approval request has been made.
 */
export async function largeApprovalRequests(stack: Stack, target: TargetServer, count: number): Promise<string[]> {
  const held: string[] = [];
  for (let n = 0; n < count; n += 1) {
    const parts = Array.from({ length: 6 }, (_, i) => `part ${n}.${i} `.padEnd(10_000, 'p'));
    const created = await http<{ id: string; operations: { id: string }[] }>(stack.apiUrl, 'POST', '/v1/executions', {
      key: DEMO.agent,
      body: submission([
        httpOp('big', { method: 'POST', url: `${target.base}/orders`, body: { parts } }, { requires_approval: true }),
      ]),
    });
    expect([created.status, created.status === 201 ? '' : created.text]).toEqual([201, '']);
    held.push(created.body.operations[0].id);
    await waitForApprovalRequest(stack, created.body.id);
  }
  return held;
}
