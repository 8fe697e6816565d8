import { isIP } from 'node:net';
import type { VerityConfig } from '@verity/platform';
import type { NextFunction, Request, Response } from 'express';
import { Problem, sendProblem } from '../problem/problem';
import { MCP_PATH } from './json-rpc-error';

/**
 * DNS rebinding: a web page of another site, its host name re-pointed at this API's address, would call /mcp as a
 * page of "its own" origin — and with a key it can guess (the local demo's are published), carry out tools. The MCP
 * Streamable HTTP transport says servers MUST validate Origin. A request with no Origin comes from a client that is no
 * browser (the MCP SDKs, curl) and is not judged; one with an Origin is let in only from the API's own origin or one
 * the operator lists in MCP_ALLOWED_ORIGINS. Anything else — another site, `null` (a sandboxed or file: page), text
 * that is no origin — is 403 before the key is looked up. The Host header is no help: under DNS rebinding it names
 * the attacker's host, as the Origin does.
 *
 * Mounted in front of the body checks and the parser (main.ts), not as a module's middleware behind them: a body they
 * refuse (no JSON, too large, another charset) is then still a foreign page's 403, and an allowed page's refusal carries
 * Access-Control-Allow-Origin, so the page can read why.
 */
export class McpOriginCheck {
  private readonly allowed: ReadonlySet<string>;

  constructor(config: Pick<VerityConfig, 'MCP_ALLOWED_ORIGINS'>) {
    this.allowed = new Set(config.MCP_ALLOWED_ORIGINS);
  }

  /** A POST to /mcp and its preflight are judged; every other request passes (the routing is case and slash strict). */
  readonly use = (req: Request, res: Response, next: NextFunction): void => {
    if (req.path !== MCP_PATH || (req.method !== 'POST' && req.method !== 'OPTIONS')) {
      next();
      return;
    }
    const origin = req.headers.origin;
    // Whether the answer may be read depends on the Origin: no cache may hand one origin's answer to another.
    res.vary('origin');
    if (origin === undefined || this.allowed.has(origin) || ownOrigins(req).includes(origin)) {
      // A page of an allowed origin on another host or port is cross-origin to the browser: without CORS its preflight
      // found no route and it could never read an answer (a refusal of its key included), so listing it did nothing.
      if (origin !== undefined) {
        res.setHeader('access-control-allow-origin', origin);
        res.setHeader('access-control-expose-headers', MCP_EXPOSED_HEADERS);
      }
      next();
      return;
    }
    sendProblem(
      req,
      res,
      new Problem(
        403,
        'forbidden',
        'Forbidden',
        `this MCP endpoint does not answer pages of the origin ${JSON.stringify(origin.slice(0, 200))}: only the ` +
          'API’s own origin and those the operator allows (MCP_ALLOWED_ORIGINS); a client that is no browser sends ' +
          'no Origin header',
      ),
    );
  };
}

/**
 * What a page of an allowed origin may send to /mcp besides the CORS-safelisted headers: the key, the JSON body's type
 * (application/json is not safelisted), the transport's own headers, and the trace context a client may add.
 */
export const MCP_REQUEST_HEADERS =
  'authorization, content-type, accept, mcp-protocol-version, mcp-session-id, last-event-id, traceparent, tracestate';

/** What such a page may read of an answer besides the safelisted headers: why to wait, the id to quote, its session. */
const MCP_EXPOSED_HEADERS = 'retry-after, x-request-id, www-authenticate, mcp-session-id';

/**
 * The origins of pages this server itself serves on the connection's own address: `http://<address>:<port>` of the
 * socket's local end (the address and port the client reached), and on loopback also the loopback names
 * (`localhost`, `127.0.0.1`, `[::1]`) with that port. A rebinding page's origin names the attacker's host, never an
 * address literal or localhost. Behind a proxy or a port mapping the public origin is another: the operator lists it.
 */
function ownOrigins(req: Request): string[] {
  const { localAddress, localPort } = req.socket;
  if (localAddress === undefined || localPort === undefined) return [];
  const ip = localAddress.replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/, '');
  const literal = isIP(ip) === 6 ? `[${ip}]` : ip;
  const loopback = ip === '::1' || ip.startsWith('127.');
  const hosts = loopback ? [literal, 'localhost', '127.0.0.1', '[::1]'] : [literal];
  return hosts.map((host) => new URL(`http://${host}:${localPort}`).origin);
}
