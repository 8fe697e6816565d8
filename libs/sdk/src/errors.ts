import type { Execution, FieldError, KnownProblemCode, OperationDetail, ProblemDetails } from './types';

/**
 * A problem code: the last segment of the problem `type` URL. The codes the API sends today are KnownProblemCode
 * (generated from the API's document); the set is open, and an answer without a problem type gets `http-<status>`.
 */
export type ProblemCode = KnownProblemCode | (string & NonNullable<unknown>);

/**
 * The API refused a request: an RFC 9457 problem (`application/problem+json`). `code` is the last segment of the
 * problem type URL (`https://verity.dev/problems/not-found` → `not-found`); `body` is the problem exactly as sent.
 * Subclasses exist per status class (validation, auth, not found, conflict, …) so `instanceof` reads naturally.
 */
export class VerityError extends Error {
  override name = 'VerityError';
  /** HTTP status. */
  readonly status: number;
  /** The problem type URL (`about:blank` when the server sent no problem body). */
  readonly type: string;
  readonly code: ProblemCode;
  readonly title: string;
  readonly detail: string | undefined;
  readonly instance: string | undefined;
  /** Field errors of a validation problem (empty otherwise). */
  readonly errors: FieldError[];
  /** The problem as the server sent it (a synthesized one when the body was not a problem). */
  readonly body: ProblemDetails;
  /** Retry-After, in milliseconds, when the server sent one. */
  readonly retryAfterMs: number | undefined;
  /** The server's x-request-id, for support. */
  readonly requestId: string | undefined;
  /**
   * True for a request with an effect (a POST) whose answer does not settle whether it was carried out: a 5xx, an
   * `idempotency-key-in-flight`, or any answer after an earlier attempt of it that may have reached the server (a
   * network error, a 5xx). Read the resource, or repeat a create with `idempotencyKey`, before deciding to repeat it.
   */
  readonly outcomeUnknown: boolean;
  /** For such a create: the Idempotency-Key sent; repeating the create with it is safe and tells the outcome. */
  readonly idempotencyKey: string | undefined;

  constructor(
    problem: ProblemDetails,
    init: { retryAfterMs?: number; requestId?: string; outcomeUnknown?: boolean; idempotencyKey?: string } = {},
  ) {
    super(messageOf(problem) + (init.outcomeUnknown ? outcomeAdvice(init.idempotencyKey) : ''));
    this.status = problem.status;
    this.type = problem.type;
    this.code = codeOf(problem.type, problem.status);
    this.title = problem.title;
    this.detail = problem.detail;
    this.instance = problem.instance;
    this.errors = Array.isArray(problem.errors) ? problem.errors : [];
    this.body = problem;
    this.retryAfterMs = init.retryAfterMs;
    this.requestId = init.requestId;
    this.outcomeUnknown = init.outcomeUnknown ?? false;
    this.idempotencyKey = init.outcomeUnknown ? init.idempotencyKey : undefined;
  }

  /** True when this is the given problem code (`err.is('not-found')`). */
  is(code: ProblemCode): boolean {
    return this.code === code;
  }

  /** The field error for one field path, if any (`err.fieldError('operations[0].params.amount')`). */
  fieldError(field: string): FieldError | undefined {
    return this.errors.find((e) => e.field === field);
  }
}

/** 400: the request is invalid; `errors` names each field and rule. Nothing was written. */
export class VerityValidationError extends VerityError {
  override name = 'VerityValidationError';
}

/** 401 (no or unknown key) and 403 (the key's role may not do this). */
export class VerityAuthError extends VerityError {
  override name = 'VerityAuthError';
}

/** 404: nothing with that id is visible to this key (other tenants' resources look the same). */
export class VerityNotFoundError extends VerityError {
  override name = 'VerityNotFoundError';
}

/** 409: conflict with the current state, e.g. `retry-not-allowed`, `idempotency-key-in-flight`, `already-decided`. */
export class VerityConflictError extends VerityError {
  override name = 'VerityConflictError';
}

/**
 * 412 `precondition-failed`: the resource changed since the version the request named (`If-Match`, an approval's
 * `requestedAt`). Nothing was written: read it again and decide on what it is now.
 */
export class VerityPreconditionFailedError extends VerityError {
  override name = 'VerityPreconditionFailedError';
}

/** 422 `idempotency-key-reused`: the Idempotency-Key was first used with a different body. */
export class VerityIdempotencyError extends VerityError {
  override name = 'VerityIdempotencyError';
}

/** 429: rate limited or too many open streams; see `retryAfterMs`. */
export class VerityRateLimitError extends VerityError {
  override name = 'VerityRateLimitError';
}

/** 5xx. */
export class VerityServerError extends VerityError {
  override name = 'VerityServerError';
}

/**
 * No HTTP answer: connection refused or reset, DNS failure, a per-request timeout, or a stream that could not be
 * re-established. For a request that may change something (`outcomeUnknown`), the request may have reached the
 * server: read the resource before deciding to repeat it — the SDK itself never repeats such a request.
 */
export class VerityNetworkError extends Error {
  override name = 'VerityNetworkError';
  readonly method: string;
  readonly path: string;
  /** Requests sent before giving up. */
  readonly attempts: number;
  /** True for a request with an effect (a POST): it may or may not have been carried out. */
  readonly outcomeUnknown: boolean;
  /** For a create: the Idempotency-Key sent; repeating the create with it is safe and tells the outcome. */
  readonly idempotencyKey: string | undefined;
  /**
   * The answer an earlier attempt got before the later ones got none (a retried 503 and its problem, such as
   * `secrets-unreadable`, with its type and detail); undefined when no attempt was answered.
   */
  readonly lastAnswer: VerityError | undefined;

  constructor(init: {
    method: string;
    path: string;
    attempts: number;
    outcomeUnknown: boolean;
    idempotencyKey?: string;
    cause?: unknown;
    /** An earlier attempt's answer, and the number of that attempt. */
    lastAnswer?: { error: VerityError; attempt: number };
  }) {
    const advice = init.outcomeUnknown ? outcomeAdvice(init.idempotencyKey) : '';
    const answered = init.lastAnswer;
    const unanswered = answered ? init.attempts - answered.attempt : init.attempts;
    const attempts = answered
      ? `${unanswered === 1 ? 'the last' : `the last ${unanswered}`} of ${init.attempts} attempts`
      : `${init.attempts} attempt${init.attempts === 1 ? '' : 's'}`;
    super(
      `${init.method} ${init.path}: no response ${answered ? 'to' : 'after'} ${attempts} (${describeCause(init.cause)})` +
        (answered ? `; attempt ${answered.attempt} answered ${answered.error.message}` : '') +
        advice,
      { cause: init.cause },
    );
    this.method = init.method;
    this.path = init.path;
    this.attempts = init.attempts;
    this.outcomeUnknown = init.outcomeUnknown;
    this.idempotencyKey = init.idempotencyKey;
    this.lastAnswer = answered?.error;
  }
}

/** `waitForSettled` or `waitFor` ran out of time. `lastExecution` is the last state seen (undefined if none was read). */
export class VerityTimeoutError extends Error {
  override name = 'VerityTimeoutError';
  constructor(
    readonly executionId: string,
    readonly timeoutMs: number,
    readonly lastExecution: Execution | undefined,
  ) {
    super(
      `execution ${executionId} did not settle within ${timeoutMs} ms` +
        (lastExecution ? ` (last seen: ${lastExecution.status}, effects ${lastExecution.effects?.summary})` : ''),
    );
  }
}

/**
 * `waitFor` learned that the condition can never hold: the stream ended `settled` (nothing can change any more) and
 * the execution, read after that, does not satisfy it. `execution` is that final state.
 */
export class VerityConditionError extends Error {
  override name = 'VerityConditionError';
  constructor(
    readonly executionId: string,
    readonly execution: Execution,
  ) {
    super(
      `execution ${executionId} can no longer change and the awaited condition does not hold ` +
        `(${execution.status}, effects ${execution.effects?.summary})`,
    );
  }
}

/**
 * A read answered without the ETag it always carries (a proxy or gateway stripped it): there is no version to decide
 * on, so none is made up — an empty one would be sent as no version at all. `operation` is what was read, to show; a
 * decision on it as it was read needs a path to the API that keeps the ETag header.
 */
export class VerityMissingETagError extends Error {
  override name = 'VerityMissingETagError';
  constructor(
    readonly method: string,
    readonly path: string,
    readonly operation: OperationDetail,
  ) {
    super(
      `${method} ${path} was answered without an ETag (was it removed on the way?): there is no version to decide on; ` +
        'let the ETag header through, or decide without ifMatch knowingly',
    );
  }
}

export function isVerityError(error: unknown, code?: ProblemCode): error is VerityError {
  return error instanceof VerityError && (code === undefined || error.code === code);
}

/** `https://verity.dev/problems/not-found` → `not-found`; without a usable type URL, `http-<status>`. */
export function codeOf(type: string | undefined, status: number): ProblemCode {
  if (type && type !== 'about:blank') {
    const segment = type
      .replace(/[?#].*$/, '')
      .replace(/\/+$/, '')
      .split('/')
      .pop();
    if (segment) return segment;
  }
  return `http-${status}`;
}

/** What to do about a request with an effect whose outcome is unknown. */
function outcomeAdvice(idempotencyKey: string | undefined): string {
  return idempotencyKey
    ? '; the request may have reached the server: repeat it with the same Idempotency-Key to learn its outcome'
    : '; the request may have reached the server: its outcome is unknown, read the resource before repeating it';
}

/**
 * Builds the typed error for a non-2xx answer. A body that is not a problem (a proxy's HTML page, an empty body)
 * still gives a VerityError, with a problem synthesized from the status and the text kept in `detail`.
 */
export function errorFromResponse(
  status: number,
  headers: Headers,
  text: string,
  effect: { outcomeUnknown: boolean; idempotencyKey?: string } = { outcomeUnknown: false },
): VerityError {
  const problem = parseProblem(status, text);
  const init = { retryAfterMs: parseRetryAfter(headers.get('retry-after')), requestId: headers.get('x-request-id') };
  const Class = errorClassFor(problem.status, codeOf(problem.type, problem.status));
  return new Class(problem, {
    retryAfterMs: init.retryAfterMs,
    requestId: init.requestId ?? undefined,
    outcomeUnknown: effect.outcomeUnknown,
    idempotencyKey: effect.idempotencyKey,
  });
}

export function parseProblem(status: number, text: string): ProblemDetails {
  let parsed: unknown;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = undefined;
  }
  if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) {
    const body = parsed as Record<string, unknown>;
    const errors = Array.isArray(body.errors) ? body.errors.filter(isFieldError) : undefined;
    return {
      ...body,
      type: typeof body.type === 'string' ? body.type : 'about:blank',
      title: typeof body.title === 'string' ? body.title : statusTitle(status),
      // The status received decides, not a `status` member saying otherwise (a gateway's JSON, an intermediary that
      // changed the status): a 503 whose body says 400 must not read as "refused, nothing was written".
      status,
      detail: typeof body.detail === 'string' ? body.detail : undefined,
      instance: typeof body.instance === 'string' ? body.instance : undefined,
      ...(errors ? { errors } : {}),
    };
  }
  const snippet = text.trim().slice(0, 500);
  return { type: 'about:blank', title: statusTitle(status), status, ...(snippet ? { detail: snippet } : {}) };
}

/** Retry-After as delta seconds or an HTTP date, in milliseconds. */
export function parseRetryAfter(value: string | null): number | undefined {
  if (!value) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

function errorClassFor(status: number, code: ProblemCode): typeof VerityError {
  if (code === 'validation-error' || status === 400) return VerityValidationError;
  if (status === 401 || status === 403) return VerityAuthError;
  if (status === 404) return VerityNotFoundError;
  if (status === 409) return VerityConflictError;
  if (status === 412) return VerityPreconditionFailedError;
  if (code === 'idempotency-key-reused') return VerityIdempotencyError;
  if (status === 429) return VerityRateLimitError;
  if (status >= 500) return VerityServerError;
  return VerityError;
}

function isFieldError(value: unknown): value is FieldError {
  if (!value || typeof value !== 'object') return false;
  const e = value as Record<string, unknown>;
  return typeof e.field === 'string' && typeof e.rule === 'string' && typeof e.message === 'string';
}

function messageOf(problem: ProblemDetails): string {
  const head = `${problem.status} ${problem.title}`;
  return problem.detail ? `${head}: ${problem.detail}` : head;
}

function statusTitle(status: number): string {
  const titles: Record<number, string> = {
    400: 'Bad request',
    401: 'Unauthorized',
    403: 'Forbidden',
    404: 'Not found',
    409: 'Conflict',
    422: 'Unprocessable content',
    429: 'Too many requests',
    500: 'Internal error',
    502: 'Bad gateway',
    503: 'Service unavailable',
    504: 'Gateway timeout',
  };
  return titles[status] ?? `HTTP ${status}`;
}

function describeCause(cause: unknown): string {
  if (!cause) return 'unknown cause';
  const error = cause as { name?: string; message?: string; cause?: { code?: string; message?: string } };
  const code = error.cause?.code;
  const message = error.message ?? String(cause);
  return code ? `${message}: ${code}` : message;
}
