import * as http from 'node:http';
import * as https from 'node:https';
import type { LookupFunction } from 'node:net';

export interface HttpExchangeRequest {
  method: string;
  url: string;
  headers?: Record<string, string>;
  body?: unknown;
  timeoutMs: number;
  /**
   * The most of a response body read (default 64 KiB): past it the body is not read further, the connection is closed
   * and the answer is `truncated` with no body (never parsed, never echoed raw anywhere).
   */
  maxResponseBytes?: number;
  /** Resolve and vet the host name; the address it returns is the one connected to (no DNS rebinding). */
  lookup?: LookupFunction;
  signal?: AbortSignal;
  /**
   * The answer is its status: the exchange ends when the status line and headers arrive, and the body is not read
   * (the connection is closed). For a caller to whom the body means nothing — a webhook delivery, which a 2xx settles
   * however long the receiver then takes over its body.
   */
  statusOnly?: boolean;
}

export type HttpExchange =
  | {
      kind: 'response';
      status: number;
      headers: http.IncomingHttpHeaders;
      body: unknown;
      /**
       * The body went past `maxResponseBytes`: it was not read further (the connection was closed) and `body` is
       * undefined. Nothing can be told from such an answer but its status.
       */
      truncated: boolean;
      /**
       * The text `body` was parsed from, when it was JSON: where it says more than `body` shows (a member named twice,
       * a number the double in `body` holds rounded), a value read there is not what was sent (`rawJsonIssue`).
       */
      json?: string;
    }
  /** Provably never delivered: the connection (or TLS) was never established, so the request was never written. */
  | { kind: 'not_delivered'; code: string; message: string }
  /** The request may have reached the provider: timeout, reset, or anything after the connection was up. */
  | { kind: 'ambiguous'; code: string; message: string };

/**
 * The text without one leading U+FEFF. RFC 8259 forbids a sender to add a byte order mark but lets a parser ignore
 * one; JSON.parse refuses it. Ignored, the text reads one way — as the JSON after the mark — so the answer is read.
 */
function withoutByteOrderMark(text: string): string {
  return text.startsWith('\ufeff') ? text.slice(1) : text;
}

/** The body as text without its byte order mark, or null when its bytes are no UTF-8. */
function utf8TextOf(bytes: Buffer): string | null {
  try {
    return withoutByteOrderMark(new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes));
  } catch {
    return null;
  }
}

const agents = {
  http: new http.Agent({ keepAlive: true, maxSockets: 256, timeout: 2000 }),
  https: new https.Agent({ keepAlive: true, maxSockets: 256, timeout: 2000 }),
};

/** An answer taken for its status and headers alone, its body never read. */
function statusAlone(res: http.IncomingMessage): HttpExchange {
  return { kind: 'response', status: res.statusCode ?? 0, headers: res.headers, body: undefined, truncated: false };
}

/**
 * One HTTP exchange, classified by what we can prove about delivery. The only place connectors talk HTTP:
 * redirects are never followed, every call has a deadline, and bodies are size-capped.
 */
export function httpExchange(request: HttpExchangeRequest): Promise<HttpExchange> {
  const url = new URL(request.url);
  const isHttps = url.protocol === 'https:';
  const transport = isHttps ? https : http;
  const payload = request.body === undefined ? undefined : Buffer.from(JSON.stringify(request.body));
  const maxBytes = request.maxResponseBytes ?? 64 * 1024;
  return new Promise((resolve) => {
    let settled = false;
    let connected = false;
    const finish = (result: HttpExchange) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      stopListening();
      request.signal?.removeEventListener('abort', onAbort);
      resolve(result);
    };
    const failure = (code: string, message: string): HttpExchange =>
      connected ? { kind: 'ambiguous', code, message } : { kind: 'not_delivered', code, message };
    const req = transport.request(
      url,
      {
        method: request.method,
        headers: {
          accept: 'application/json',
          ...(payload ? { 'content-type': 'application/json', 'content-length': String(payload.length) } : {}),
          ...request.headers,
        },
        // A custom lookup means the caller vets addresses: give it a fresh socket so the vetted address is used.
        agent: request.lookup ? false : isHttps ? agents.https : agents.http,
        lookup: request.lookup,
      },
      (res) => {
        // An informational status Node took for the answer (a 101 without an Upgrade header): the connection has left
        // HTTP. The status is the answer, and the connection is closed — kept alive, it would carry the next request
        // (another operation's) into whatever the provider speaks now.
        const informational = (res.statusCode ?? 0) < 200;
        if (request.statusOnly || informational) {
          finish(statusAlone(res));
          res.destroy();
          if (informational) req.destroy();
          return;
        }
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size <= maxBytes) {
            chunks.push(chunk);
            return;
          }
          // Past the limit the answer is not read (it could be endless, or arrive a byte at a time until the timeout):
          // the exchange ends now, and the connection is closed rather than drained.
          finish({
            kind: 'response',
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: undefined,
            truncated: true,
          });
          res.destroy();
        });
        res.on('end', () => {
          // JSON text is UTF-8 (RFC 8259 §8.1): bytes that are no UTF-8 were read as U+FFFD, so an id, a status or an
          // amount read from them is not what was sent (and other bytes read the same). Such an answer is no JSON.
          const text = utf8TextOf(Buffer.concat(chunks));
          let body: unknown = undefined;
          let json: string | undefined;
          if (text !== null && text.length > 0) {
            try {
              body = JSON.parse(text);
              json = text;
            } catch {
              body = undefined;
            }
          }
          finish({
            kind: 'response',
            status: res.statusCode ?? 0,
            headers: res.headers,
            body,
            truncated: false,
            ...(json !== undefined && { json }),
          });
        });
        res.on('error', (error: NodeJS.ErrnoException) =>
          finish({ kind: 'ambiguous', code: error.code ?? 'ERESPONSE', message: error.message }),
        );
      },
    );
    // A pooled keep-alive socket serves many requests: a listener added per request would pile up on it (and never
    // fire, since a reused socket is connected already). So listen only while the socket is still connecting, and
    // stop listening when this exchange ends, whichever comes first.
    let pending: { socket: import('node:net').Socket; event: string; listener: () => void } | undefined;
    const stopListening = () => {
      pending?.socket.off(pending.event, pending.listener);
      pending = undefined;
    };
    req.on('socket', (socket) => {
      const markConnected = () => {
        connected = true;
        pending = undefined;
      };
      if (!socket.connecting && !isHttps) markConnected();
      else if (isHttps && (socket as import('node:tls').TLSSocket).encrypted && !socket.connecting) markConnected();
      else {
        const event = isHttps ? 'secureConnect' : 'connect';
        socket.once(event, markConnected);
        pending = { socket, event, listener: markConnected };
      }
    });
    req.on('close', stopListening);
    // A 101 with an Upgrade: Node hands over the socket here (without a listener it destroys it and the exchange waited
    // for its timeout). The status is the answer; the socket, which speaks another protocol now, is closed.
    req.on('upgrade', (res: http.IncomingMessage, socket: import('node:net').Socket) => {
      finish(statusAlone(res));
      socket.destroy();
    });
    req.on('error', (error: NodeJS.ErrnoException) => finish(failure(error.code ?? 'EREQUEST', error.message)));
    const timer = setTimeout(() => {
      finish(failure('ETIMEDOUT', `no answer within ${request.timeoutMs} ms`));
      req.destroy();
    }, request.timeoutMs);
    const onAbort = () => {
      finish(failure('EABORTED', 'aborted'));
      req.destroy();
    };
    request.signal?.addEventListener('abort', onAbort, { once: true });
    if (payload) req.write(payload);
    req.end();
  });
}
