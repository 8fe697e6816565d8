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
