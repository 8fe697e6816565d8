import { Controller, Delete, Get, Options, Patch, Post, Put, Req, Res, applyDecorators } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { ApiBearerAuth, ApiExcludeEndpoint, ApiResponse, ApiTags } from '@nestjs/swagger';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { type JSONRPCMessage, JSONRPCMessageSchema } from '@modelcontextprotocol/sdk/types.js';
import { Verity } from '@verity/sdk';
import { STATE_CHANGING_TOOLS, createVerityMcpServer, readableRequestId } from '@verity/sdk/mcp';
import type { Request, Response } from 'express';
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { bearerToken, clientAddress } from '../auth/auth.guard';
import { internalCallHeaders } from '../auth/internal-caller';
import { JSON_MEDIA_TYPE, bodyWasEmpty } from '../http/parse';
import { Public } from '../auth/principal';
import type { Principal } from '../auth/principal';
import { ApiEndpoint } from '../openapi';
import { Problem } from '../problem/problem';
import { refuseQuery } from '../http/no-query';
import { JSON_RPC_CODE, JsonRpcId, MCP_PATH, refuseBody, sendJsonRpcError } from './json-rpc-error';
import { NOT_ACCEPTABLE, acceptRefusal, normaliseAccept } from './mcp-accept';
import { McpCancellations } from './mcp-cancellations';
import { McpInFlight, McpInFlightBound } from './mcp-in-flight';
import { McpWaits } from './mcp-waits';
import { MCP_REQUEST_HEADERS } from './mcp-origin';

/**
 * A JSON-RPC 2.0 message: MCP's own format, also for the transport's refusals. Written once, as the JsonRpcMessage
 * component (buildOpenApi makes a schema's `definitions` components), and referred to by every answer that has one.
 */
const JSON_RPC_MESSAGE = {
  $ref: '#/definitions/JsonRpcMessage',
  definitions: {
    JsonRpcMessage: {
      type: 'object' as const,
      required: ['jsonrpc'],
      properties: {
        jsonrpc: { type: 'string' as const, enum: ['2.0'] },
        id: { description: 'the request’s id (a string or an integer), null when it could not be read' },
        result: { type: 'object' as const },
        error: {
          type: 'object' as const,
          required: ['code', 'message'],
          properties: { code: { type: 'integer' as const }, message: { type: 'string' as const }, data: {} },
        },
      },
    },
  },
};
/** A JSON-RPC error answer (id null: the request was not read as one message), with an example of its own. */
function jsonRpcError(code: number, message: string) {
  return {
    'application/json': { schema: JSON_RPC_MESSAGE, example: { jsonrpc: '2.0', id: null, error: { code, message } } },
  };
}

/**
 * The MCP server over Streamable HTTP, stateless: every POST is one JSON-RPC exchange with a fresh server, so any
 * API process can answer any request and nothing is kept between them. The global AuthGuard has already checked
 * the Bearer key exactly as for /v1 (unknown key 401, operator key 403, rate limit); the tools then call this
 * API's own REST endpoints through the SDK with the same key, so its tenant, role and every /v1 rule apply.
 */
@ApiTags('integrations')
@Controller(MCP_PATH)
export class McpController {
  constructor(
    private readonly adapterHost: HttpAdapterHost,
    private readonly cancellations: McpCancellations,
    private readonly inFlight: McpInFlight,
    private readonly waits: McpWaits,
  ) {}

  @Post()
  // On the POST alone: the preflight is public (a browser sends no key with it).
  @ApiBearerAuth()
  @ApiEndpoint({
    id: 'postMcpMessage',
    summary: 'MCP (Streamable HTTP, stateless): tools and execution resources for agents',
    description:
      'JSON-RPC 2.0 per the Model Context Protocol. Tools: list_connectors, submit_execution, get_execution, ' +
      'wait_for_execution, cancel_execution, get_operation; resources verity://executions/{id}. The key’s tenant ' +
      'and role apply as on /v1.',
    response: {
      description: 'The JSON-RPC response, as JSON or as a server-sent event stream (per the request’s Accept)',
      headers: {
        'mcp-session-id': {
          description:
            'on the answer to an initialize: a random id to send with the later messages; it scopes the client’s ' +
            'notifications/cancelled to its own requests (nothing else is kept of a session)',
          schema: { type: 'string' },
        },
      },
      content: {
        'application/json': { schema: JSON_RPC_MESSAGE },
        'text/event-stream': { schema: { type: 'string' } },
      },
    },
    problems: [401, 403, 429, 'too-many-mcp-requests', 'api-stopping'],
  })
  @ApiResponse({ status: 202, description: 'A notification or response was accepted; no body' })
  @ApiResponse({
    status: 400,
    description:
      'A body that is no JSON (-32700 Parse error); JSON that holds what no message may (a member given twice, a ' +
      'control character), is not a JSON-RPC message, an empty batch, a batch whose requests share an id, or a batch ' +
      'of more requests than one key or tenant may have in flight (split it); or a ' +
      'query parameter, which /mcp takes none of (-32600 Invalid Request, with the request id where it can be read)',
    content: jsonRpcError(-32700, 'Parse error: the body is not valid JSON'),
  })
  @ApiResponse({
    status: 408,
    description: 'The body did not arrive in time',
    content: jsonRpcError(-32000, 'the request body did not arrive within 30 s'),
  })
  @ApiResponse({
    status: 413,
    description: 'The body is larger than 256 KiB',
    content: jsonRpcError(-32000, 'the body limit is 256 KiB'),
  })
  @ApiResponse({
    status: 406,
    description: 'Accept must list application/json and text/event-stream (any letter case), neither with q=0',
    content: jsonRpcError(-32000, NOT_ACCEPTABLE),
  })
  @ApiResponse({
    status: 415,
    description: 'The body must be UTF-8 application/json',
    content: jsonRpcError(-32000, 'Unsupported Media Type: Content-Type must be application/json'),
  })
  async post(@Req() req: Request, @Res() res: Response): Promise<void> {
    // Arrived once the process began to stop (a body that ended late, a kept-alive connection): its tools would call
    // back into an API whose listener may be closed, and a submission would end "no answer" (ECONNREFUSED), its outcome
    // unknown to the agent. Refused whole first, nothing in it carried out; the client sends it again elsewhere.
    if (this.waits.isStopping) throw Problem.stopping();
    // Unknown fields are rejected, never dropped — in a query too, as on /v1 (RefuseUnreadQuery, which judges /v1, /health
    // and / only): `POST /mcp?dry_run=true` carried out the submission it held as if the parameter had not been there.
    // The transport takes none; each one given is refused as a refused body is here, a JSON-RPC Invalid Request.
    try {
      refuseQuery(req);
    } catch (error) {
      if (!(error instanceof Problem)) throw error;
      refuseBody(req, res, error, JSON_RPC_CODE.invalidRequest, req.body);
      return;
    }
    // A body of another media type is left unread by the JSON parser: the checks below took it for a missing message
    // (400 "no JSON-RPC message", also for `text/plain`). The transport's own answer to such a body, given here.
    if (!JSON_MEDIA_TYPE.test(req.headers['content-type'] ?? '')) {
      sendJsonRpcError(
        res,
        415,
        JSON_RPC_CODE.transport,
        'Unsupported Media Type: Content-Type must be application/json',
      );
      return;
    }
    // The transport's check of Accept reads substrings, case-sensitively (`Application/JSON` refused,
    // `text/event-stream;q=0` taken): judged here as HTTP reads it, then handed on in the spelling it looks for.
    const notAcceptable = acceptRefusal(req.headers.accept);
    if (notAcceptable !== null) {
      sendJsonRpcError(res, 406, JSON_RPC_CODE.transport, notAcceptable);
      return;
    }
    normaliseAccept(req);
    // No body at all (the parser hands on `{}` for an empty one) is no JSON text: a Parse error, as text that is not JSON
    // is, not an Invalid Request, which says valid JSON was read and is no message.
    if (req.body === undefined || bodyWasEmpty(req)) {
      const empty = Problem.validation([{ field: '(body)', rule: 'json', message: 'the body is empty' }]);
      refuseBody(req, res, empty, JSON_RPC_CODE.parseError);
      return;
    }
    // An empty array is no batch (JSON-RPC 2.0: "an Array with at least one value"; MCP's 2025-03-26 transport: "an
    // array batching one or more" messages; later revisions have no batches). The SDK's transport takes it for a
    // batch of notifications and answers 202, as if something had been accepted.
    if (Array.isArray(req.body) && req.body.length === 0) {
      refuseInvalidRequest(
        res,
        'Invalid Request: an empty batch (a JSON-RPC batch holds one message at least; send one message)',
      );
      return;
    }
    // Each answer is matched to its request by the id: of two requests with one id in a batch, the transport sent one
    // answer and dropped the other, though both ran — a second submission was carried out and never reported. JSON-RPC
    // has the client choose ids that tell its requests apart (MCP: an id is never reused); such a batch is refused
    // whole, before anything in it is carried out.
    const shared = Array.isArray(req.body) ? sharedRequestId(req.body as unknown[]) : undefined;
    if (shared !== undefined) {
      refuseInvalidRequest(
        res,
        `Invalid Request: two requests of the batch have id ${JSON.stringify(shared)} (each request needs an id of its own; nothing in the batch was carried out)`,
      );
      return;
    }
    // JSON that is no JSON-RPC message (`{}`, `{"jsonrpc":"2.0"}`, `[1]`) is an Invalid Request (JSON-RPC 2.0: -32600);
    // the transport answered it -32700 Parse error, which says the JSON itself could not be read.
    const invalid = (Array.isArray(req.body) ? (req.body as unknown[]) : [req.body]).findIndex(
      (message) => !JSONRPCMessageSchema.safeParse(message).success,
    );
    if (invalid >= 0) {
      if (Array.isArray(req.body)) {
        refuseInvalidRequest(
          res,
          `Invalid Request: message ${invalid} of the batch is no JSON-RPC 2.0 request, notification or response (nothing in the batch was carried out)`,
        );
      } else {
        // With the request's id where it can be read (its params do not fit its method, say), as the stdio entry point
        // answers the same line: the client matches the error to its call instead of waiting for its own timeout.
        refuseInvalidRequest(
          res,
          'Invalid Request: the body is no JSON-RPC 2.0 request, notification or response',
          readableRequestId(req.body),
        );
      }
      return;
    }
    const principal = (req as Request & { principal?: Principal }).principal;
    const keyId = principal?.keyId;
    const messages: unknown[] = Array.isArray(req.body) ? req.body : [req.body];
    const requests = messages.filter((message) => requestIdOf(message) !== undefined).length;
    // A batch of more requests than a bound takes with the process otherwise empty could never be carried out: a 429
    // ("again later") would be repeated for ever. The batch itself is what is wrong, as an empty one is.
    const largest = this.inFlight.largestPost;
    if (principal !== undefined && requests > largest.limit) {
      refuseInvalidRequest(
        res,
        `Invalid Request: the batch carries ${requests} requests; at most ${largest.limit} ${BATCH_BOUND[largest.bound]} ` +
          `are taken at once in an API process, so it could never be carried out: split it into batches of at most ` +
          `${largest.limit} (nothing in the batch was carried out)`,
      );
      return;
    }
    // Waits past the streams a key may hold, likewise: in one batch they could never all be taken.
    const waits = messages.filter(isWait).length;
    if (principal !== undefined && waits > this.inFlight.waitLimit) {
      refuseInvalidRequest(
        res,
        `Invalid Request: the batch carries ${waits} wait_for_execution calls; at most ${this.inFlight.waitLimit} of ` +
          'one key are taken at once in an API process (as many as the streams a key may hold), so it could never be ' +
          `carried out: split it (nothing in the batch was carried out)`,
      );
      return;
    }
    const client = new Verity({
      baseUrl: this.selfUrl(),
      // The guard let the request in, so it carries a Bearer key.
      apiKey: bearerToken(req) ?? '',
      userAgent: 'verity-mcp-http',
      // One attempt: a loopback call that fails will not do better by repeating, and the agent sees the error.
      maxAttempts: 1,
      // Each call is the client's: counted against its address, not this process's loopback address.
      fetch: withHeaders(internalCallHeaders(clientAddress(req))),
    });
    const mcp = createVerityMcpServer({ client });
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    // The requests in flight in this process are bounded per key, per tenant and in all (notifications are not counted,
    // so a cancellation is never refused): past a bound the POST is refused whole, before anything in it runs.
    // Taken after everything that may throw before the response is watched below (its 'close' gives them back): taken
    // before, a throw (the server's address gone at shutdown) kept them for good.
    const places = principal === undefined ? undefined : this.inFlight.take(principal, requests, waits);
    if (places !== undefined && !places.taken) {
      throw new Problem(
        429,
        'too-many-mcp-requests',
        'Too many MCP requests in flight',
        `${IN_FLIGHT_BOUND[places.bound](places.limit)} (this POST carries ${places.bound === 'waits' ? `${waits} of them` : requests}); nothing in it was carried ` +
          'out: send it again once an answer has come',
        {},
        { 'retry-after': '5' },
      );
    }
    // The session a client's cancellations are scoped to (McpCancellations): the Mcp-Session-Id it sends, which an
    // initialize is answered with. The transport stays stateless (nothing is kept of a session, any process takes its
    // POSTs): the id only tells the requests of clients sharing a key apart, as their JSON-RPC ids do not.
    const session = sessionOf(req);
    if (messages.some((message) => isObject(message) && message.method === 'initialize' && 'id' in message)) {
      res.setHeader('mcp-session-id', randomUUID());
    }
    const release = places?.release ?? (() => undefined);
    const forget: (() => void)[] = [release, this.waits.serve(mcp)];
    if (keyId !== undefined) {
      for (const message of messages) {
        // Only calls that change nothing: the match is by key and id, and clients sharing a key count their ids
        // alike, so a cancellation may name another client's request; a submission stopped mid-call would leave that
        // client with an unknown outcome (a generated idempotency key it never saw). Such calls run to their end.
        const id = changesState(message) ? undefined : requestIdOf(message);
        if (id !== undefined) {
          forget.push(this.cancellations.track(keyId, session, id, () => cancelRequest(transport, id)));
        }
      }
    }
    const closed = () => {
      for (const done of forget) done();
      mcp.close();
      void transport.close();
      void mcp.server.close();
    };
    res.on('close', closed);
    // Closed before the handler ran (the client left during authentication): 'close' was emitted already and would
    // never be heard, leaving the requests tracked (with their server and client) for the process's life. Nobody is
    // left to read an answer: nothing is carried out but a cancellation the POST carried, the client's last word.
    if (res.closed || res.destroyed || req.socket.destroyed) {
      res.off('close', closed);
      closed();
      if (keyId !== undefined) this.carryOutCancellations(keyId, session, messages);
      return;
    }
    await mcp.server.connect(transport);
    // A client cancels a request by POSTing notifications/cancelled, not by closing the request's response: the
    // cancellation is carried out wherever the request it names is being answered (this process or another). Only as
    // the transport hands it on, once it has taken the POST: carried out before, a POST it then refused whole (a batch
    // over its 100 messages, an Accept or a protocol version it does not take) still stopped the key's requests.
    if (keyId !== undefined) {
      const deliver = transport.onmessage;
      transport.onmessage = (message, extra) => {
        if (!OWN_CANCELLATIONS.has(message)) {
          this.carryOutCancellations(keyId, session, [message]);
          // A client's cancellation stops what it may stop by the line above: the key's calls that change nothing,
          // this POST's among them (each answered with a cancellation error). Handed on to this POST's server as well,
          // it also stopped a submission or a cancel of the same batch — a call that is never stopped — mid-call, and
          // that call got no answer: the POST was never answered, whatever the call had written.
          if (cancelledRequestId(message) !== undefined) return;
        }
        deliver?.(message, extra);
      };
    }
    leaveConnectionToNode(res);
    await transport.handleRequest(req, res, req.body);
  }

  /**
   * The CORS preflight of a browser page (McpOriginCheck has refused an origin not allowed, and named an allowed one in
   * Access-Control-Allow-Origin): POST with the transport's headers. Public: a preflight never carries the key.
   */
  @Options()
  @Public()
  @ApiEndpoint({
    id: 'preflightMcp',
    summary: 'CORS preflight of a browser page calling /mcp',
    description:
      'A page of an origin in MCP_ALLOWED_ORIGINS (or the API’s own) is granted POST with the transport’s headers; ' +
      'any other origin is 403 before anything else. No key is needed: a browser sends none with a preflight.',
    response: {
      status: 204,
      description: 'POST allowed: Access-Control-Allow-Origin names the page’s origin when it sent one',
      headers: {
        'access-control-allow-origin': { schema: { type: 'string' } },
        'access-control-allow-methods': { schema: { type: 'string', enum: ['POST'] } },
        'access-control-allow-headers': { schema: { type: 'string' } },
      },
    },
    problems: [403],
  })
  preflight(@Res() res: Response): void {
    res.setHeader('allow', 'POST, OPTIONS');
    res.setHeader('access-control-allow-methods', 'POST');
    res.setHeader('access-control-allow-headers', MCP_REQUEST_HEADERS);
    res.setHeader('access-control-max-age', '600');
    res.status(204).end();
  }

  // GET and DELETE only ever answer 405 (the transport's spec asks for that answer), and so do PUT and PATCH: every
  // method but POST is told where to go (Allow: POST), not "no route".
  @NotAllowed(Get())
  get(): never {
    throw notAllowed();
  }

  @NotAllowed(Delete())
  delete(): never {
    throw notAllowed();
  }

  @NotAllowed(Put())
  put(): never {
    throw notAllowed();
  }

  @NotAllowed(Patch())
  patch(): never {
    throw notAllowed();
  }

  /**
   * Carries out the client's cancellations among `messages` (each notifications/cancelled naming a request of the key,
   * in the client's session where it sent one), wherever the request named is being answered.
   */
  private carryOutCancellations(keyId: string, session: string | undefined, messages: readonly unknown[]): void {
    for (const message of messages) {
      const cancelled = cancelledRequestId(message);
      if (cancelled !== undefined) this.cancellations.cancel(keyId, session, cancelled);
    }
  }

  /** This process's own listening address: the MCP tools reach the REST API through it. */
  private selfUrl(): string {
    const address = this.adapterHost.httpAdapter.getHttpServer().address() as AddressInfo;
    const host =
      address.address === '0.0.0.0' ? '127.0.0.1' : address.address === '::' ? '[::1]' : hostLiteral(address.address);
    return `http://${host}:${address.port}`;
  }
}

/** Whose requests a batch too large for any moment would always outnumber. */
const BATCH_BOUND: Record<McpInFlightBound, string> = {
  key: 'of one key',
  waits: 'waits of one key',
  tenant: 'of one tenant (all its keys)',
  process: 'of all tenants',
};

/** What a 429 too-many-mcp-requests says of the bound the POST would have passed. */
const IN_FLIGHT_BOUND: Record<McpInFlightBound, (limit: number) => string> = {
  key: (limit) => `at most ${limit} MCP requests of one key at once in each API process`,
  waits: (limit) =>
    `at most ${limit} wait_for_execution calls of one key at once in each API process (each follows a stream, and a ` +
    `key holds at most ${limit} streams: MAX_STREAMS_PER_KEY)`,
  tenant: (limit) =>
    `at most ${limit} MCP requests of one tenant (all its keys) at once in each API process, half of what the ` +
    'process takes, so that other tenants are still served',
  process: (limit) => `at most ${limit} MCP requests of all tenants at once in each API process, and this one has them`,
};

/**
 * 400 with JSON-RPC's Invalid Request error: the message (or the batch) is refused whole, nothing carried out. The id is
 * the request's where it could be read, null otherwise.
 */
function refuseInvalidRequest(res: Response, message: string, id: JsonRpcId = null): void {
  sendJsonRpcError(res, 400, JSON_RPC_CODE.invalidRequest, message, undefined, id);
}

/**
 * JSON-RPC's "request cancelled" (the code LSP gave it; MCP names none). Sent only so that the response of the POST that
 * carried the request can end: the client that cancelled no longer waits for it.
 */
const REQUEST_CANCELLED = -32800;

/** The cancellations this process hands its own server (cancelRequest): carried out here already, not the client's. */
const OWN_CANCELLATIONS = new WeakSet<object>();

/**
 * Stops a request this process is answering: the server's own handling of notifications/cancelled aborts the tool
 * (and the API calls it makes, a wait's stream among them) and keeps its answer from being sent; the request is then
 * answered with a cancellation error, which lets the transport end the POST's response. A client that did not cancel it
 * (another client with the same key and request id) learns why its call ended instead of waiting for its timeout.
 */
function cancelRequest(transport: StreamableHTTPServerTransport, id: string | number): void {
  const notification: JSONRPCMessage = {
    jsonrpc: '2.0',
    method: 'notifications/cancelled',
    params: { requestId: id, reason: 'cancelled by the client' },
  };
  OWN_CANCELLATIONS.add(notification);
  transport.onmessage?.(notification);
  void transport
    .send(
      {
        jsonrpc: '2.0',
        id,
        error: {
          code: REQUEST_CANCELLED,
          message:
            `Request ${JSON.stringify(id)} cancelled: a notifications/cancelled naming it arrived with this API key. ` +
            'The call changes nothing (a submission or a cancel is never stopped): call it again if its answer is ' +
            'still wanted.',
        },
      },
      { relatedRequestId: id },
    )
    .catch(() => undefined); // answered already, or its response closed
}

/**
 * The transport names `Connection: keep-alive` on every answer it writes, and Node keeps a connection open on that word
 * even where the client said `Connection: close` or spoke HTTP/1.0 without asking for keep-alive: the answer came, and
 * the connection stayed open on the server until the client gave up on it (RFC 9112, section 9.6: the server closes
 * it). Without the transport's word Node decides from the request, as it does for every other route.
 */
function leaveConnectionToNode(res: Response): void {
  const writeHead = res.writeHead.bind(res) as (...args: unknown[]) => Response;
  res.writeHead = ((...args: unknown[]) => {
    const headers = args[args.length - 1];
    if (isObject(headers) && !Array.isArray(headers)) {
      for (const name of Object.keys(headers)) if (name.toLowerCase() === 'connection') delete headers[name];
    }
    return writeHead(...args);
  }) as Response['writeHead'];
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isRequestId(value: unknown): value is string | number {
  return typeof value === 'string' || (typeof value === 'number' && Number.isInteger(value));
}

/** The id of a JSON-RPC request (a message with a method and an id), if this is one. */
function requestIdOf(message: unknown): string | number | undefined {
  if (!isObject(message) || typeof message.method !== 'string' || !isRequestId(message.id)) return undefined;
  return message.id;
}

/** An id two requests of the batch share (1 and "1" are two ids, as JSON-RPC compares them), if any. */
function sharedRequestId(messages: unknown[]): string | number | undefined {
  const seen = new Set<string>();
  for (const message of messages) {
    if (!isObject(message) || typeof message.method !== 'string' || !isRequestId(message.id)) continue;
    const key = `${typeof message.id}:${message.id}`;
    if (seen.has(key)) return message.id;
    seen.add(key);
  }
  return undefined;
}

/** Whether this is a call of a tool that changes something (a submission, a cancel). */
/** A request (it has an id) calling wait_for_execution. */
function isWait(message: unknown): boolean {
  if (requestIdOf(message) === undefined || !isObject(message) || message.method !== 'tools/call') return false;
  return isObject(message.params) && message.params.name === 'wait_for_execution';
}

function changesState(message: unknown): boolean {
  if (!isObject(message) || message.method !== 'tools/call' || !isObject(message.params)) return false;
  const name = message.params.name;
  return typeof name === 'string' && STATE_CHANGING_TOOLS.includes(name);
}

/**
 * The Mcp-Session-Id a POST carries (visible ASCII, as the transport's spec has it, at most 255 characters); undefined
 * without one, or with one that is no session id this server gives (then its cancellations are the key's, as without).
 */
function sessionOf(req: Request): string | undefined {
  const value = req.headers['mcp-session-id'];
  return typeof value === 'string' && /^[\x21-\x7e]{1,255}$/.test(value) ? value : undefined;
}

/** The request a `notifications/cancelled` names, if this is one. */
function cancelledRequestId(message: unknown): string | number | undefined {
  if (!isObject(message) || message.method !== 'notifications/cancelled' || 'id' in message) return undefined;
  const params = message.params;
  return isObject(params) && isRequestId(params.requestId) ? params.requestId : undefined;
}

/** The global fetch, with these headers added to every request. */
function withHeaders(extra: Record<string, string>): typeof fetch {
  return (input, init) => {
    const headers = new Headers(init?.headers);
    for (const [name, value] of Object.entries(extra)) headers.set(name, value);
    return fetch(input, { ...init, headers });
  };
}

function hostLiteral(address: string): string {
  return address.includes(':') ? `[${address}]` : address;
}

/**
 * A method /mcp only ever answers 405 for (notAllowed), routed by `route`. Public, like a method no route has: with no
 * key or a wrong one the answer is the same 405, not a 401 the document does not describe for it (and a key looked up
 * for nothing). Not documented as an operation.
 */
function NotAllowed(route: MethodDecorator) {
  return applyDecorators(route, Public(), ApiExcludeEndpoint());
}

function notAllowed(): Problem {
  return new Problem(
    405,
    'method-not-allowed',
    'Method not allowed',
    'this MCP server keeps no session state: send each JSON-RPC message as a POST; there is no server-initiated stream and no session to end',
    {},
    // What /mcp takes: a page's CORS preflight and the POST of a message, as the 405 of any other method there says.
    { allow: 'OPTIONS, POST' },
  );
}
