import { connect } from 'node:net';

/** A thin JSON-over-fetch helper for tests that exercise the raw HTTP contract (status codes, headers, bodies). */
export interface HttpResult<T = unknown> {
  status: number;
  headers: Headers;
  body: T;
  text: string;
}

export async function http<T = unknown>(
  baseUrl: string,
  method: string,
  path: string,
  options: { key?: string; body?: unknown; rawBody?: string; headers?: Record<string, string> } = {},
): Promise<HttpResult<T>> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.key) headers.authorization = `Bearer ${options.key}`;
  let body: string | undefined;
  if (options.rawBody !== undefined) body = options.rawBody;
  else if (options.body !== undefined) {
    body = JSON.stringify(options.body);
    headers['content-type'] ??= 'application/json';
  }
  const res = await fetch(`${baseUrl}${path}`, { method, headers, body });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = text;
  }
  return { status: res.status, headers: res.headers, body: parsed as T, text };
}

let counter = 0;
export function unique(prefix: string): string {
  counter += 1;
  return `${prefix}-${Date.now().toString(36)}-${process.pid}-${counter}`;
}

export function charge(reference: string, extra: Record<string, unknown> = {}) {
  return {
    key: 'charge',
    connector: 'sandbox.payments',
    action: 'charge',
    params: { amount: 1250, currency: 'EUR', reference },
    ...extra,
  };
}

export function sms(clientRef: string, extra: Record<string, unknown> = {}) {
  return {
    key: 'notify',
    connector: 'sandbox.sms',
    action: 'send',
    params: { to: '+15550100', body: 'Paid', client_ref: clientRef },
    ...extra,
  };
}

/** The submission the SDK's and the MCP server's unit specs send to their stand-in API: one charge of order-1. */
export const UNIT_SUBMISSION = { agent_id: 'unit', intent: 'charge', operations: [charge('order-1')] };

export function submission(operations: unknown[], extra: Record<string, unknown> = {}) {
  return { agent_id: 'test-agent', intent: 'test intent', operations, ...extra };
}

/** What a server answered on a raw connection, until it closed it. */
export interface RawAnswer {
  raw: string;
  status: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * Raw bytes on a fresh connection to `baseUrl`, and everything the server answered until it closed — for requests no
 * HTTP client would send. `halfClose: false` writes without ending: a server that answers and closes a request it
 * refuses would otherwise see the half-closed socket first and close it before answering.
 */
export function rawExchange(
  baseUrl: string,
  bytes: Buffer | string,
  options: { halfClose?: boolean } = {},
): Promise<RawAnswer> {
  const url = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(url.port), url.hostname);
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('latin1');
      const [head, ...rest] = text.split('\r\n\r\n');
      const [statusLine, ...lines] = head.split('\r\n');
      const headers = Object.fromEntries(
        lines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]),
      );
      resolve({ raw: text, status: Number(statusLine.split(' ')[1]), headers, body: rest.join('\r\n\r\n') });
    });
    if (options.halfClose === false) socket.write(bytes);
    else socket.end(bytes);
  });
}

/** What a TCP connect to host:port gets: 'connected', or the error's code (ECONNREFUSED when nothing listens). */
export function reach(host: string, port: number): Promise<string> {
  return new Promise<string>((resolve) => {
    const socket = connect(port, host);
    socket.once('connect', () => {
      socket.destroy();
      resolve('connected');
    });
    socket.once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
  });
}
