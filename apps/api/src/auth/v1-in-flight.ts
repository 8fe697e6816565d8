import {
  CallHandler,
  CanActivate,
  ExecutionContext,
  Inject,
  Injectable,
  NestInterceptor,
  SetMetadata,
} from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { VERITY_CONFIG, VerityConfig, originForm } from '@verity/platform';
import type { Request, Response } from 'express';
import { Observable, finalize } from 'rxjs';
import { KeyShare, KeyShareBound } from '../held-counts';
import { Problem } from '../problem/problem';
import { internalCallClient } from './internal-caller';
import type { Principal } from './principal';

const OWN_BOUND_KEY = 'verity:own-in-flight-bound';

/**
 * A /v1 route whose requests are not counted among the key's requests in flight: an SSE stream, which is long-lived
 * and bounded already (MAX_STREAMS_PER_KEY per key, MAX_STREAMS_PER_PROCESS per tenant and process). Counted, a key's
 * 20 open streams would hold 20 of its 64 places for as long as they stay open (hours), and its reads would be refused
 * for a cause no read makes.
 */
export const OwnInFlightBound = () => SetMetadata(OWN_BOUND_KEY, true);

/** What a 429 says of the bound the request would have passed, per the share that counts it. */
type BoundWords = Record<KeyShareBound, (limit: number) => string>;

const BOUND: BoundWords = {
  key: (limit) =>
    `at most ${limit} requests of one key in flight at once in each API process (MAX_V1_REQUESTS_PER_KEY)`,
  tenant: (limit) =>
    `at most ${limit} requests of one tenant (all its keys) in flight at once in each API process, half of what the ` +
    'process takes (MAX_V1_REQUESTS_PER_PROCESS), so that other tenants are still served',
  process: (limit) =>
    `at most ${limit} requests of all tenants in flight at once in each API process (MAX_V1_REQUESTS_PER_PROCESS), ` +
    'and this one has them',
};

/** The same, for a call the MCP endpoint makes for a client (counted against the MCP bounds). */
const MCP_CALL_BOUND: BoundWords = {
  key: (limit) =>
    `at most ${limit} API calls of one key's MCP tools in flight at once in each API process ` +
    '(MAX_MCP_REQUESTS_PER_KEY), counting calls whose MCP client has gone away but whose work goes on',
  tenant: (limit) =>
    `at most ${limit} API calls of one tenant's MCP tools (all its keys) in flight at once in each API process, half ` +
    'of what the process takes (MAX_MCP_REQUESTS_PER_PROCESS), counting calls whose MCP client has gone away but ' +
    'whose work goes on',
  process: (limit) =>
    `at most ${limit} API calls of all tenants' MCP tools in flight at once in each API process ` +
    '(MAX_MCP_REQUESTS_PER_PROCESS), and this one has them',
};

/** One way of counting /v1 requests in flight: its places and what its 429 says. */
interface Counted {
  readonly places: KeyShare;
  readonly words: BoundWords;
}

/**
 * The /v1 requests in flight in this process, counted per key, per tenant and in all (KeyShare) from the moment the
 * key is admitted until the answer has ended or the client has gone away. The rate limit (a token bucket) lets a key
 * send a burst of hundreds at once: 400 concurrent reads of large executions from one agent key took every session
 * of the Postgres pool, and 65–248 of them — and every other tenant's requests meanwhile — were answered 503.
 *
 * Not counted: a request to a route marked OwnInFlightBound (a stream). A call the MCP endpoint makes to this process
 * for a client (internal-caller.ts) is counted apart, against the MCP bounds (MAX_MCP_REQUESTS_PER_KEY and
 * MAX_MCP_REQUESTS_PER_PROCESS): the client's MCP request that makes it is counted there already, and counted here too
 * a full batch of them (100 by default) would pass this bound. Yet the MCP request's place is given back when its
 * client leaves, and the calls it made go on (aborting a fetch does not stop the handler it started): counted nowhere,
 * a client could send a batch, leave and send it again without end, each round's calls still holding Postgres sessions.
 * Counted apart, each keeps its place until its work ends, as any /v1 request does, and past the bound it is refused
 * 429 — its tool answers "refused", and the agent calls it again.
 *
 * A guard after AuthGuard (global guards run in the order given): the key and its tenant are known, and nothing of the
 * request has been carried out yet — a refusal writes nothing.
 */
@Injectable()
export class V1InFlight implements CanActivate {
  private readonly clients: Counted;
  private readonly mcpCalls: Counted;

  constructor(
    private readonly reflector: Reflector,
    @Inject(VERITY_CONFIG) config: VerityConfig,
  ) {
    this.clients = {
      places: new KeyShare(config.MAX_V1_REQUESTS_PER_KEY, config.MAX_V1_REQUESTS_PER_PROCESS),
      words: BOUND,
    };
    this.mcpCalls = {
      places: new KeyShare(config.MAX_MCP_REQUESTS_PER_KEY, config.MAX_MCP_REQUESTS_PER_PROCESS),
      words: MCP_CALL_BOUND,
    };
  }

  canActivate(context: ExecutionContext): boolean {
    const req = context.switchToHttp().getRequest<Request & { principal?: Principal }>();
    const principal = req.principal;
    if (principal === undefined || !isV1(req.originalUrl)) return true;
    if (this.reflector.getAllAndOverride<boolean>(OWN_BOUND_KEY, [context.getHandler(), context.getClass()])) {
      return true;
    }
    const counted = internalCallClient(req.headers) === undefined ? this.clients : this.mcpCalls;
    const place = counted.places.take(principal);
    if (!place.taken) throw refused(counted.words, place.bound, place.limit);
    const res = context.switchToHttp().getResponse<Response>();
    const held = new HeldPlace(place.release, () => counted.places.take(principal), counted.words);
    (req as HeldRequest)[HELD] = held;
    // 'close' is emitted once the answer has been sent or the connection has gone (the client left mid-request).
    res.once('close', held.clientGone);
    // Gone already (the client left while its key was checked): 'close' was emitted and would never be heard again.
    if (res.closed || res.destroyed || req.socket.destroyed) held.clientGone();
    return true;
  }
}

/** The 429 of a request past a bound. */
function refused(words: BoundWords, bound: KeyShareBound, limit: number): Problem {
  return new Problem(
    429,
    'rate-limited',
    'Too many requests',
    `${words[bound](limit)}; nothing of this request was carried out: send it again once an answer has come`,
    {},
    { 'retry-after': '1' },
  );
}

const HELD = Symbol('v1-in-flight');
type HeldRequest = Request & { [HELD]?: HeldPlace };

/**
 * A request's place, given back once its answer has ended or its client has gone — but never while its handler is still
 * at work: a client that leaves does not stop what its request does (a read of a large execution, a write waiting on a
 * row lock), and its place given back at once let a key send its bound, leave, and send it again, as often as it liked,
 * each round still holding a session of the pool.
 */
class HeldPlace {
  private gone = false;
  private working = false;

  constructor(
    private release: () => void,
    private readonly takeAgain: () => ReturnType<KeyShare['take']>,
    private readonly words: BoundWords,
  ) {}

  /** The answer has ended or the client has gone: given back now, or when the handler's work ends. */
  readonly clientGone = () => {
    this.gone = true;
    if (!this.working) this.release();
  };

  /**
   * The handler begins. Its client may have left since the place was taken (a later guard awaited something), the
   * place then given back: it is taken again for the handler's work, or refused as the guard would have.
   */
  begins(): void {
    this.working = true;
    if (!this.gone) return;
    const place = this.takeAgain();
    if (!place.taken) {
      this.working = false;
      throw refused(this.words, place.bound, place.limit);
    }
    this.release = place.release;
  }

  /** The handler's work has ended (answered or thrown). */
  readonly ends = () => {
    this.working = false;
    if (this.gone) this.release();
  };
}

/**
 * Holds a counted request's place (V1InFlight) for as long as its handler is at work, also once its client has gone.
 * The first interceptor: what the others do after the handler (the redaction of the answer reads the tenant's
 * secrets) is part of that work.
 */
@Injectable()
export class V1InFlightWork implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const held = context.switchToHttp().getRequest<HeldRequest>()[HELD];
    if (held === undefined) return next.handle();
    held.begins();
    return next.handle().pipe(finalize(held.ends));
  }
}

/**
 * Whether the request's target (its path, before any query) is under /v1. An absolute-form target naming the host Host
 * names (`GET http://host/v1/executions`) is served as its path by the router, so it is judged by that path too: judged
 * by its text it began with `http:`, and escaped the count.
 */
function isV1(target: string): boolean {
  const path = originForm(target).split('?')[0];
  return path === '/v1' || path.startsWith('/v1/');
}
