import { VerityConditionError, VerityError, VerityMissingETagError, VerityTimeoutError } from './errors';
import { HEADER_VALUE, Transport, TransportOptions, pathSegment, sleep } from './http';
import { ReviewApi } from './review';
import { isExecutionSettled } from './settled';
import { ExecutionStream, StreamOptions } from './stream';
import { settlingEvents } from './wait-reads';
import type {
  ConnectorInfo,
  ConnectorList,
  EventList,
  Execution,
  ExecutionEvent,
  ExecutionList,
  ListEventsQuery,
  ListExecutionsQuery,
  OperationDetail,
  ResolveRequest,
  RetryResult,
  StatusModelDocument,
  SubmissionRequest,
} from './types';

/**
 * `baseUrl` (e.g. `http://localhost:3000`) and `apiKey` are required. `fetch` replaces the global fetch (a proxy
 * agent, instrumentation, tests). `timeoutMs` bounds each request (30 s); `maxAttempts` (3) and `backoffMs` (200)
 * govern the retries of retry-safe requests only: GETs, and creates (which always carry an Idempotency-Key).
 */
export type VerityOptions = TransportOptions;

/** The API's rule for an Idempotency-Key. */
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

export interface RequestOptions {
  signal?: AbortSignal;
}

export interface CreateOptions extends RequestOptions {
  /**
   * Up to 255 printable ASCII characters, kept 24 h per tenant: the same key and body give the same execution.
   * When omitted the SDK generates one (a UUID), so its own retries after a network error are safe.
   */
  idempotencyKey?: string;
}

export interface CreateResult {
  execution: Execution;
  /** The server answered with an execution created earlier for this key (`Idempotent-Replayed: true`). */
  replayed: boolean;
  /** The key that was sent (the caller's, or the generated one). */
  idempotencyKey: string;
  /** Requests sent: above 1 when a network error or an in-flight answer was retried with the same key. */
  attempts: number;
}

export interface ReasonOptions extends RequestOptions {
  reason?: string;
}

export interface DecisionOptions extends RequestOptions {
  /**
   * The ETag of the operation the decision was made on (`operations.getWithETag`, or the `etag` of a decision's
   * answer), sent as `If-Match`: the decision is taken only while the operation is still that version — never on a later
   * hold of it, or an approval asked for again, that its author did not see. Otherwise a VerityPreconditionFailedError
   * (412 `precondition-failed`, `body.current_etag` the version now) and nothing is written; a VerityConflictError
   * `already-decided` still names a decision made first. Without it, the decision is taken on the operation as it is.
   * An empty one is refused with a TypeError before anything is sent: it names no version, and a decision sent with it
   * would be taken on the operation as it is (an intermediary drops an empty header) — leave it out to mean that.
   */
  ifMatch?: string;
}

/** The operation and its ETag: the version to name (`ifMatch`) when deciding on what was shown. */
export interface OperationWithETag {
  operation: OperationDetail;
  etag: string;
}

export interface ApprovalOptions extends ReasonOptions, DecisionOptions {
  /**
   * The approval request the decision answers (the operation's `approval.requested_at` as it was shown): the decision
   * is taken only while that request is the one waiting, never for one asked for since (a VerityConflictError
   * `already-decided` when the one shown was decided, a VerityPreconditionFailedError, 412 `precondition-failed`,
   * otherwise).
   */
  requestedAt?: string;
}

export interface WaitOptions extends RequestOptions {
  /**
   * Default 60 s. On expiry the promise rejects with a VerityTimeoutError carrying the last state seen (read then,
   * within 1 s more, if the wait had read none or its last read was cut short; a state read then that is the one waited
   * for resolves the wait instead).
   */
  timeoutMs?: number;
  /** Interval of the GET polling used when the stream is unavailable (default 1 s). */
  pollIntervalMs?: number;
  /**
   * Called with each event while waiting: those the stream delivers and, when the awaited state is read before the
   * stream has delivered its events, the rest of the log up to it.
   */
  onEvent?: (event: ExecutionEvent) => void;
}

/**
 * What a wait that ran out before reading the execution may take to read it for its VerityTimeoutError: 1 s, so that
 * the rejection comes at most that long after `timeoutMs`.
 */
const EXPIRY_READ_TIMEOUT_MS = 1_000;

/** Executions: submit, read, list, cancel, and follow their events. */
export class ExecutionsApi {
  constructor(private readonly transport: Transport) {}

  /**
   * POST /v1/executions. Returns the execution (201 = committed). A network error is retried (up to `maxAttempts`)
   * with the same Idempotency-Key, so at most one execution is ever created. Use `createWithMeta` to learn whether
   * the answer was a replay.
   */
  async create(body: SubmissionRequest, options: CreateOptions = {}): Promise<Execution> {
    return (await this.createWithMeta(body, options)).execution;
  }

  /** As `create`, with the replay flag, the key sent and the number of attempts. */
  async createWithMeta(body: SubmissionRequest, options: CreateOptions = {}): Promise<CreateResult> {
    const idempotencyKey = options.idempotencyKey ?? globalThis.crypto.randomUUID();
    // A key no header can carry (`€`) makes fetch throw before sending, which would read as a lost answer ("repeat it
    // with the same key") that no repetition could ever get: refused here, with the API's own rule.
    if (!IDEMPOTENCY_KEY.test(idempotencyKey)) {
      throw new RangeError('Verity: idempotencyKey must be 1 to 255 printable ASCII characters without spaces');
    }
    const result = await this.transport.request<Execution>({
      method: 'POST',
      path: '/v1/executions',
      body,
      headers: { 'idempotency-key': idempotencyKey },
      retry: 'safe',
      signal: options.signal,
    });
    return {
      execution: result.data,
      replayed: result.headers.get('idempotent-replayed') === 'true',
      idempotencyKey,
      attempts: result.attempts,
    };
  }

  /** GET /v1/executions/{id}: the execution with its operations, effects and failure. */
  async get(id: string, options: RequestOptions = {}): Promise<Execution> {
    return this.getJson<Execution>(`/v1/executions/${pathSegment(id)}`, undefined, options);
  }

  /** GET /v1/executions: one page, newest first; pass `next_cursor` as `cursor` for the next. */
  async list(query: ListExecutionsQuery = {}, options: RequestOptions = {}): Promise<ExecutionList> {
    return this.getJson<ExecutionList>('/v1/executions', { ...query }, options);
  }

  /** Every execution matching the query, page after page. */
  async *listAll(query: Omit<ListExecutionsQuery, 'cursor'> = {}, options: RequestOptions = {}) {
    let cursor: string | undefined;
    do {
      const page = await this.list({ ...query, cursor }, options);
      yield* page.data;
      cursor = page.next_cursor ?? undefined;
    } while (cursor);
  }

  /** POST /v1/executions/{id}/cancel. Never retried. PREPARED operations become CANCELLED; sent ones keep settling. */
  async cancel(id: string, options: ReasonOptions = {}): Promise<Execution> {
    const result = await this.transport.request<Execution>({
      method: 'POST',
      path: `/v1/executions/${pathSegment(id)}/cancel`,
      body: options.reason !== undefined ? { reason: options.reason } : {},
      retry: 'never',
      signal: options.signal,
    });
    return result.data;
  }

  /** GET /v1/executions/{id}/events: one page of the append-only log, after an event id. */
  async events(id: string, query: ListEventsQuery = {}, options: RequestOptions = {}): Promise<EventList> {
    return this.getJson<EventList>(`/v1/executions/${pathSegment(id)}/events`, { ...query }, options);
  }

  /** The live event stream (SSE), resuming by itself after a disconnect; see ExecutionStream. */
  stream(id: string, options: StreamOptions = {}): ExecutionStream {
    return new ExecutionStream(this.transport, id, options);
  }

  /**
   * Resolves with the execution once it is terminal, every operation has settled (terminal, MANUAL_REVIEW, or
   * ACKNOWLEDGED without read-back) and no evaluation of its criteria is still owed: the agent's part is over, even if a reviewer still owes a resolution (the stream
   * stays open for that; use `waitFor` to wait for it). Follows the stream from its start (the log so far, then live)
   * and reads the execution only after an event that can settle it (the execution reaching a terminal status; after
   * that, an operation reaching a status that can be settled, or `outcome.evaluated`), or when the stream ends: usually
   * one read and the stream. If the stream cannot be used, polls GET.
   * Rejects with a VerityTimeoutError after `timeoutMs`, or with the API's error (404 …).
   */
  waitForSettled(id: string, options: WaitOptions = {}): Promise<Execution> {
    // Only an event that can be the last change before settled is worth a read (see settlingEvents): about one per
    // execution, where reading after every status event took two or three more.
    return this.waitUntil(id, isExecutionSettled, options, settlingEvents());
  }

  /**
   * Resolves with the execution once `predicate` holds for it, e.g.
   * `waitFor(id, (e) => e.operations.every((op) => op.status !== 'MANUAL_REVIEW'))`. The predicate is judged on the
   * execution as read (GET) after each event the stream delivers, from its start (the log so far, then live), and when
   * it ends — so a state that passes in the blink of an eye can be missed: follow `stream()` for those. If the stream
   * cannot be used, or it ends with reason `deadline`, polls GET every `pollIntervalMs`. Rejects with a VerityConditionError when the stream ends `settled`
   * (nothing can change any more) and the predicate still does not hold, a VerityTimeoutError after `timeoutMs`, or
   * the API's error (404, 401 once the key is revoked …).
   */
  waitFor(id: string, predicate: (execution: Execution) => boolean, options: WaitOptions = {}): Promise<Execution> {
    return this.waitUntil(id, predicate, options, () => true);
  }

  private async waitUntil(
    id: string,
    predicate: (execution: Execution) => boolean,
    options: WaitOptions,
    worthReading: (event: ExecutionEvent) => boolean,
  ): Promise<Execution> {
    const timeoutMs = options.timeoutMs ?? 60_000;
    const pollIntervalMs = options.pollIntervalMs ?? 1_000;
    const controller = new AbortController();
    const timeout = new Error('timeout');
    const timer = setTimeout(() => controller.abort(timeout), timeoutMs);
    const fromCaller = () => controller.abort(options.signal?.reason);
    if (options.signal?.aborted) fromCaller();
    options.signal?.addEventListener('abort', fromCaller, { once: true });
    const signal = controller.signal;
    let last: Execution | undefined;
    // A read under way when time runs out was cut short: what it would have told is read again at expiry.
    let reading = false;
    const read = async (): Promise<Execution> => {
      reading = true;
      const execution = await this.get(id, { signal });
      reading = false;
      return (last = execution);
    };
    try {
      try {
        // No read before the stream: followed from its start, it first delivers the log so far, so an execution
        // already settled (or already passing) is read after the event that made it so, or at the stream's end. Its
        // refusals are the API's (404, 401 …), thrown below as a first read's were.
        const stream = this.stream(id, { signal, retryOnBusy: false, maxReconnects: 3 });
        // Returning from inside the loop closes the connection.
        for await (const event of stream) {
          options.onEvent?.(event);
          if (!worthReading(event)) continue;
          const current = await read();
          if (predicate(current)) {
            // The read may be ahead of the stream: hand `onEvent` the events up to the state that satisfied it.
            if (options.onEvent) await this.catchUp(id, stream.lastEventId, options.onEvent, signal);
            return current;
          }
        }
        const atEnd = await read();
        if (predicate(atEnd)) return atEnd;
        if (stream.endReason === 'settled') throw new VerityConditionError(id, atEnd);
        // deadline: a reviewer may still act, unseen by any stream; key_revoked: the next GET says so.
      } catch (error) {
        if (signal.aborted || error instanceof VerityConditionError) throw error;
        // The API's own refusals (not found, unauthorized) would only repeat themselves in polling.
        if (error instanceof VerityError && [400, 401, 403, 404].includes(error.status)) throw error;
        // Anything else (too many streams, a network that cannot hold a stream): poll.
      }
      while (true) {
        const current = await read();
        if (predicate(current)) return current;
        await sleep(pollIntervalMs, signal);
      }
    } catch (error) {
      if (signal.aborted && signal.reason === timeout) {
        // Nothing was read yet (no event worth a read came), or the read after the last event worth one was cut short:
        // the state at expiry, read under a bound of its own. Found to be the one waited for (it came as time ran out),
        // it is the answer: a VerityTimeoutError carrying a state that passes would say it never came.
        if (last === undefined || reading) last = (await readAtExpiry(this, id, options.signal)) ?? last;
        if (last !== undefined && predicate(last)) return last;
        throw new VerityTimeoutError(id, timeoutMs, last);
      }
      throw error;
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', fromCaller);
    }
  }

  /** Every event of the log after `afterId`, page by page, as it stands now. */
  private async catchUp(
    id: string,
    afterId: string | undefined,
    onEvent: (event: ExecutionEvent) => void,
    signal: AbortSignal,
  ): Promise<void> {
    let after = afterId;
    do {
      const page = await this.events(id, { after, limit: 1000 }, { signal });
      for (const event of page.data) onEvent(event);
      after = page.next_cursor ?? undefined;
    } while (after);
  }

  private async getJson<T>(
    path: string,
    query: ListExecutionsQuery | ListEventsQuery | undefined,
    options: RequestOptions,
  ) {
    const result = await this.transport.request<T>({
      method: 'GET',
      path,
      query: query as Record<string, string | number | undefined> | undefined,
      retry: 'safe',
      signal: options.signal,
    });
    return result.data;
  }
}

/** The execution, read within EXPIRY_READ_TIMEOUT_MS (and the caller's signal); undefined if it could not be. */
async function readAtExpiry(
  executions: ExecutionsApi,
  id: string,
  callerSignal: AbortSignal | undefined,
): Promise<Execution | undefined> {
  const bound = new AbortController();
  const timer = setTimeout(() => bound.abort(), EXPIRY_READ_TIMEOUT_MS);
  const signal = callerSignal ? AbortSignal.any([callerSignal, bound.signal]) : bound.signal;
  try {
    return await executions.get(id, { signal });
  } catch {
    return undefined;
  } finally {
    clearTimeout(timer);
  }
}

/** Operations: read one, approve or deny it, resolve a manual review, or retry a FAILED/CANCELLED one. */
export class OperationsApi {
  constructor(private readonly transport: Transport) {}

  /** GET /v1/operations/{id}: with evidence, recovery obligation and the resolutions permitted now. */
  async get(id: string, options: RequestOptions = {}): Promise<OperationDetail> {
    const result = await this.transport.request<OperationDetail>({
      method: 'GET',
      path: `/v1/operations/${pathSegment(id)}`,
      retry: 'safe',
      signal: options.signal,
    });
    return result.data;
  }

  /**
   * As `get`, with the operation's ETag: pass it as `ifMatch` to decide only on the operation as it was read. An answer
   * without one (an intermediary stripped it) gives a VerityMissingETagError, never an empty ETag: one would be sent as
   * no version at all, and the decision taken on whatever the operation has become. A tag an intermediary weakened
   * (`W/"…"`, as a proxy does when it compresses the answer) is given without its `W/`: Verity's ETag names a version
   * of the state a decision is taken on, never the bytes of an answer, so the opaque tag is the same version, and the
   * API compares If-Match strongly (a weak one would never match, and every decision would be a 412).
   */
  async getWithETag(id: string, options: RequestOptions = {}): Promise<OperationWithETag> {
    const path = `/v1/operations/${pathSegment(id)}`;
    const result = await this.transport.request<OperationDetail>({
      method: 'GET',
      path,
      retry: 'safe',
      signal: options.signal,
    });
    const etag = result.headers
      .get('etag')
      ?.trim()
      .replace(/^W\/(?=")/, '');
    if (!etag) throw new VerityMissingETagError('GET', path, result.data);
    return { operation: result.data, etag };
  }

  /** POST /v1/operations/{id}/approval `{ decision: 'approve' }` (reviewer role). Never retried. */
  approve(id: string, options: ApprovalOptions = {}): Promise<OperationDetail> {
    return this.decide(id, 'approve', options);
  }

  /** POST /v1/operations/{id}/approval `{ decision: 'deny' }` (reviewer role): the operation is CANCELLED. */
  deny(id: string, options: ApprovalOptions = {}): Promise<OperationDetail> {
    return this.decide(id, 'deny', options);
  }

  /** POST /v1/operations/{id}/resolve: a human resolution of MANUAL_REVIEW, with evidence (reviewer). Never retried. */
  async resolve(id: string, body: ResolveRequest, options: DecisionOptions = {}): Promise<OperationDetail> {
    return this.act<OperationDetail>(
      id,
      'resolve',
      body.due_in_seconds !== undefined
        ? { status: body.status, evidence: body.evidence, due_in_seconds: body.due_in_seconds }
        : { status: body.status, evidence: body.evidence },
      options,
    );
  }

  /**
   * POST /v1/operations/{id}/recheck (reviewer): ask the reconciler to read the source of a held operation now
   * (never a send). Answers at once (202) with the operation; a release shows as a later VERIFIED. Never retried.
   */
  async recheck(id: string, options: DecisionOptions = {}): Promise<OperationDetail> {
    return this.act<OperationDetail>(id, 'recheck', undefined, options);
  }

  /**
   * POST /v1/operations/{id}/retry: a new operation (`retry_of`) in a new execution, only from FAILED or CANCELLED;
   * otherwise a VerityConflictError with code `retry-not-allowed` (the rule is in `body.retry`). Never retried.
   */
  async retry(id: string, options: RequestOptions = {}): Promise<RetryResult> {
    return this.act<RetryResult>(id, 'retry', undefined, options);
  }

  private async decide(id: string, decision: 'approve' | 'deny', options: ApprovalOptions): Promise<OperationDetail> {
    const body = {
      decision,
      ...(options.reason !== undefined && { reason: options.reason }),
      ...(options.requestedAt !== undefined && { requested_at: options.requestedAt }),
    };
    return this.act<OperationDetail>(id, 'approval', body, options);
  }

  /** POST /v1/operations/{id}/{action}: each changes the operation, so none is ever repeated by the SDK. */
  private async act<T>(
    id: string,
    action: 'approval' | 'resolve' | 'recheck' | 'retry',
    body: unknown,
    options: DecisionOptions,
  ): Promise<T> {
    // An empty If-Match names no version: sent, the API refuses it, but an intermediary that drops empty headers turns
    // it into a decision on whatever the operation has become. A value fetch cannot send would be a lost answer.
    if (options.ifMatch !== undefined && !HEADER_VALUE.text.test(options.ifMatch)) {
      throw new TypeError(
        'Verity: ifMatch must be the ETag of a read (operations.getWithETag), not empty and printable ASCII; ' +
          'leave it out to decide on the operation as it is',
      );
    }
    const result = await this.transport.request<T>({
      method: 'POST',
      path: `/v1/operations/${pathSegment(id)}/${action}`,
      body,
      ...(options.ifMatch !== undefined && { headers: { 'if-match': options.ifMatch } }),
      retry: 'never',
      signal: options.signal,
    });
    return result.data;
  }
}

/**
 * The Verity client.
 *
 * ```ts
 * const dx = new Verity({ baseUrl: 'http://localhost:3000', apiKey: process.env.VERITY_API_KEY! });
 * const execution = await dx.executions.create({ agent_id: 'billing-bot', intent: 'Charge order 1234', operations });
 * const settled = await dx.waitForSettled(execution.id, { timeoutMs: 30_000 });
 * ```
 */
export class Verity {
  readonly executions: ExecutionsApi;
  readonly operations: OperationsApi;
  /** The review queues (reviewer role). */
  readonly review: ReviewApi;
  private readonly transport: Transport;

  constructor(options: VerityOptions) {
    this.transport = new Transport(options);
    this.executions = new ExecutionsApi(this.transport);
    this.operations = new OperationsApi(this.transport);
    this.review = new ReviewApi(this.transport);
  }

  get baseUrl(): string {
    return this.transport.baseUrl;
  }

  /** Shorthand of `executions.get`. */
  get(id: string, options: RequestOptions = {}): Promise<Execution> {
    return this.executions.get(id, options);
  }

  /** Shorthand of `executions.stream`. */
  stream(id: string, options: StreamOptions = {}): ExecutionStream {
    return this.executions.stream(id, options);
  }

  /** Shorthand of `executions.waitForSettled`. */
  waitForSettled(id: string, options: WaitOptions = {}): Promise<Execution> {
    return this.executions.waitForSettled(id, options);
  }

  /** Shorthand of `executions.waitFor`. */
  waitFor(id: string, predicate: (execution: Execution) => boolean, options: WaitOptions = {}): Promise<Execution> {
    return this.executions.waitFor(id, predicate, options);
  }

  /** GET /v1/connectors: each connector's actions, params schema, read-back, provider idempotency, reversibility. */
  async connectors(options: RequestOptions = {}): Promise<ConnectorInfo[]> {
    const result = await this.transport.request<ConnectorList>({
      method: 'GET',
      path: '/v1/connectors',
      retry: 'safe',
      signal: options.signal,
    });
    return result.data.data;
  }

  /** GET /v1/status-model: the state tables and retry rules, generated from the status model. */
  async statusModel(options: RequestOptions = {}): Promise<StatusModelDocument> {
    const result = await this.transport.request<StatusModelDocument>({
      method: 'GET',
      path: '/v1/status-model',
      retry: 'safe',
      signal: options.signal,
    });
    return result.data;
  }
}
