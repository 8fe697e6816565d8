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

/** A request written by hand on a connection of its own, its body the test's to send when it chooses. */
export interface HandWrittenRequest {
  /** Writes more of the request (the body). */
  write(bytes: string | Buffer): void;
  /** What the server has sent after its 100 Continue (all it sent, where it answered the headers at once). */
  answer(): string;
  /** The same, as bytes. */
  answerBytes(): Buffer;
  /** Waits for `done`; fails at once, saying so, if the server closed the connection or `app` exited first. */
  until(what: string, done: () => boolean | Promise<boolean>): Promise<void>;
  /** Ends the connection and waits until it is closed. */
  end(): Promise<void>;
}

/** An answer read off a connection: its status line and headers, and its body (Content-Length bytes, as UTF-8). */
export interface RawHttpAnswer {
  head: string;
  body: string;
}

/** The first whole answer in `bytes` (a status line, headers and Content-Length bytes of body), or null: not all here. */
export function wholeAnswer(bytes: Buffer): RawHttpAnswer | null {
  const end = bytes.indexOf('\r\n\r\n');
  if (end < 0) return null;
  const head = bytes.subarray(0, end).toString('latin1');
  const length = /\r\ncontent-length: (\d+)(\r\n|$)/i.exec(head);
  if (length === null || bytes.length - end - 4 < Number(length[1])) return null;
  return { head, body: bytes.subarray(end + 4, end + 4 + Number(length[1])).toString('utf8') };
}

const CONTINUE = /^HTTP\/1\.1 100 [^\r]*\r\n\r\n/;

/**
 * `head` (the request line and the headers, each ending in CRLF) with `Expect: 100-continue` on a fresh connection to
 * `app` on 127.0.0.1:`port`, once the app has answered "100 Continue": it has read the headers, so the request is known
 * to be under way (not merely sent) before the test goes on. With `answeredAtOnce`, a whole answer to the headers
 * alone (a refusal, no 100 Continue) also ends the wait: `answer()` is then that answer.
 */
export async function continuedRequest(
  app: { child: { exitCode: number | null } },
  port: number,
  head: string,
  options: { answeredAtOnce?: boolean } = {},
): Promise<HandWrittenRequest> {
  const socket = connect(port, '127.0.0.1');
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
  let received = Buffer.alloc(0);
  let socketClosed = false;
  socket.on('data', (chunk: Buffer) => (received = Buffer.concat([received, chunk])));
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  void closed.then(() => (socketClosed = true));
  const until = async (what: string, done: () => boolean | Promise<boolean>): Promise<void> => {
    while (!(await done())) {
      if (socketClosed || app.child.exitCode !== null) {
        const text = received.toString('latin1').slice(0, 400);
        throw new Error(`${what}: the connection closed first; received ${JSON.stringify(text)}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  socket.write(`${head}Expect: 100-continue\r\n\r\n`);
  await until(
    '100 Continue',
    () => CONTINUE.test(received.toString('latin1')) || (options.answeredAtOnce === true && !!wholeAnswer(received)),
  );
  // The answer starts after the interim 100 (it may have come in the same read, answered before the body was sent).
  const continued = CONTINUE.exec(received.toString('latin1'))?.[0].length ?? 0;
  return {
    write: (bytes) => void socket.write(bytes),
    answer: () => received.subarray(continued).toString(),
    answerBytes: () => received.subarray(continued),
    until,
    end: async () => {
      socket.end();
      await closed;
    },
  };
}
