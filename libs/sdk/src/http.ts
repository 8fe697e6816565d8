import { VerityError, VerityNetworkError, VerityServerError, errorFromResponse } from './errors';
import type { KnownProblemCode } from './types';

export type FetchLike = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/**
 * `safe`: repeating the request cannot cause a second effect (a GET, or a POST carrying an Idempotency-Key), so a
 * network error or a transient answer is retried. `never`: a request with an effect (approve, deny, resolve, retry,
 * cancel): sent once, whatever happens.
 */
export type RetryPolicy = 'safe' | 'never';

export interface RequestSpec {
  method: 'GET' | 'POST';
  path: string;
  query?: Record<string, string | number | undefined>;
  body?: unknown;
  headers?: Record<string, string>;
  retry: RetryPolicy;
  signal?: AbortSignal;
}

export interface HttpResult<T> {
  data: T;
  status: number;
  headers: Headers;
  /** How many requests were sent (1 unless a safe request was retried). */
  attempts: number;
}

export interface TransportOptions {
  baseUrl: string;
  apiKey: string;
  fetch?: FetchLike;
  /** Per-attempt timeout (default 30 s). */
  timeoutMs?: number;
  /** Attempts for a retry-safe request (default 3). */
  maxAttempts?: number;
  /** First backoff delay; doubles per attempt, with jitter (default 200 ms). */
  backoffMs?: number;
  userAgent?: string;
}

/**
 * A header value fetch can send as given. Anything else — a character beyond U+00FF (a zero-width space copied with a
 * key), a control character, a line break — makes fetch throw before sending, which a request would take for a lost
 * answer: retried, then reported as "no response; it may have reached the server" about a request never sent. Such a
 * value is refused where it is given instead. `token`: printable ASCII without spaces (an API key, a Last-Event-ID);
 * `text`: printable ASCII with no space at either end (fetch would trim them: another value than the one given).
 */
export const HEADER_VALUE = {
  token: /^[\x21-\x7e]+$/,
  text: /^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/,
} as const;

/** Transient answers worth repeating for a retry-safe request. */
const RETRYABLE_STATUSES = new Set([429, 502, 503, 504]);
/** A Retry-After longer than this is not waited for inside one call: the error goes to the caller. */
export const MAX_RETRY_AFTER_MS = 10_000;

/**
 * The HTTP layer: Bearer auth, JSON, problem+json errors, timeouts and the retry policy. The key lives in a private
 * field: it never appears in a URL, in an error, in `util.inspect` or `JSON.stringify` of the client, or in a log.
 */
export class Transport {
  readonly baseUrl: string;
  readonly fetch: FetchLike;
  readonly timeoutMs: number;
  readonly maxAttempts: number;
  readonly backoffMs: number;
  private readonly userAgent: string | undefined;
  readonly #apiKey: string;

  constructor(options: TransportOptions) {
    if (!options.baseUrl) throw new TypeError('Verity: baseUrl is required');
    if (!options.apiKey) throw new TypeError('Verity: apiKey is required');
    if (/[\r\n]/.test(options.apiKey)) throw new TypeError('Verity: apiKey must be a single line');
    if (!HEADER_VALUE.token.test(options.apiKey)) {
      throw new TypeError('Verity: apiKey must be printable ASCII without spaces (is an invisible character in it?)');
    }
    if (options.userAgent !== undefined && !HEADER_VALUE.text.test(options.userAgent)) {
      throw new TypeError('Verity: userAgent must be printable ASCII, with no space at either end');
    }
    const url = new URL(options.baseUrl);
    if (url.username || url.password) throw new TypeError('Verity: do not put credentials in baseUrl');
    this.baseUrl = url.toString().replace(/\/+$/, '');
    this.#apiKey = options.apiKey;
    this.fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.maxAttempts = Math.max(1, options.maxAttempts ?? 3);
    this.backoffMs = options.backoffMs ?? 200;
    this.userAgent = options.userAgent;
  }

  url(path: string, query?: Record<string, string | number | undefined>): string {
    const url = new URL(`${this.baseUrl}${path}`);
    for (const [name, value] of Object.entries(query ?? {})) {
      if (value === undefined || value === '') continue;
      // The URL would send U+FFFD for a lone surrogate: another value than the one given.
      if (!wellFormed(String(value))) throw new RangeError(`Verity: ${name} is not well-formed Unicode`);
      url.searchParams.set(name, String(value));
    }
    return url.toString();
  }

  headers(extra: Record<string, string> = {}): Record<string, string> {
    return {
      authorization: `Bearer ${this.#apiKey}`,
      ...(this.userAgent ? { 'user-agent': this.userAgent } : {}),
      ...extra,
    };
  }

  async request<T>(spec: RequestSpec): Promise<HttpResult<T>> {
    const attemptsAllowed = spec.retry === 'safe' ? this.maxAttempts : 1;
    const headers = this.headers({
      accept: 'application/json, application/problem+json',
      ...(spec.body !== undefined ? { 'content-type': 'application/json' } : {}),
      ...spec.headers,
    });
    const body = spec.body !== undefined ? JSON.stringify(spec.body) : undefined;
    const url = this.url(spec.path, spec.query);
    let lastNetworkError: unknown;
    // The last answer a retried attempt got (a 503): given with the network error if the later attempts get none.
    let lastAnswer: { error: VerityError; attempt: number } | undefined;
    // An attempt that may have been carried out: a network error or an answer that does not say it was not.
    let mayHaveReached = false;
    for (let attempt = 1; attempt <= attemptsAllowed; attempt += 1) {
      if (spec.signal?.aborted) callerAborted(spec, attempt - 1, mayHaveReached);
      const signals = [AbortSignal.timeout(this.timeoutMs), ...(spec.signal ? [spec.signal] : [])];
      let response: Response;
      let text: string;
      try {
        response = await this.fetch(url, {
          method: spec.method,
          headers,
          body,
          // A POST is never followed to a Location: fetch would turn it into a GET after a 301, 302 or 303 (and report
          // the list of executions as the one created), or send it a second time after a 307 or 308. The 3xx is the
          // answer; the API itself never redirects.
          ...(spec.method !== 'GET' ? { redirect: 'manual' as const } : {}),
          signal: AbortSignal.any(signals),
        });
        // Reading the body is part of the exchange: a reset here is a network error like any other.
        text = await response.text();
      } catch (error) {
        // The request went out (or may have): an abort now leaves its outcome as unknown as a reset would.
        if (spec.signal?.aborted) callerAborted(spec, attempt, true);
        lastNetworkError = error;
        mayHaveReached = true;
        if (attempt < attemptsAllowed) {
          await sleepUnlessAborted(backoff(this.backoffMs, attempt), spec, attempt, mayHaveReached);
          continue;
        }
        break;
      }
      if (response.ok) {
        // A 2xx to a request with an effect says it was carried out, whatever its body: one that cannot be read is
        // no reason to think otherwise, so the error says the outcome is unknown and gives the key.
        const effect =
          spec.method !== 'GET'
            ? { outcomeUnknown: true, idempotencyKey: spec.headers?.['idempotency-key'] }
            : { outcomeUnknown: false };
        return {
          data: parseJson<T>(text, response.status, effect),
          status: response.status,
          headers: response.headers,
          attempts: attempt,
        };
      }
      const error = errorFromResponse(response.status, response.headers, text);
      const inconclusive = error.status >= 500 || error.code === IN_FLIGHT;
      if (attempt < attemptsAllowed && isRetryableAnswer(error)) {
        mayHaveReached ||= inconclusive;
        lastAnswer = { error, attempt };
        const delayMs = Math.max(backoff(this.backoffMs, attempt), error.retryAfterMs ?? 0);
        await sleepUnlessAborted(delayMs, spec, attempt, mayHaveReached);
        continue;
      }
      // A request with an effect: a 5xx or an in-flight answer does not say it was not carried out, nor does any
      // answer after an attempt that may have been — the caller is told so, and given the key to learn the outcome.
      if (spec.method !== 'GET' && (inconclusive || mayHaveReached)) {
        throw errorFromResponse(response.status, response.headers, text, {
          outcomeUnknown: true,
          idempotencyKey: spec.headers?.['idempotency-key'],
        });
      }
      throw error;
    }
    throw new VerityNetworkError({
      method: spec.method,
      path: spec.path,
      attempts: attemptsAllowed,
      outcomeUnknown: spec.method !== 'GET',
      idempotencyKey: spec.headers?.['idempotency-key'],
      cause: lastNetworkError,
      lastAnswer,
    });
  }
}

/**
 * The caller's signal aborted a request. Before anything may have reached the server, the abort is what it is: the
 * signal's reason is thrown. After, a request with an effect may have been carried out: the caller is told so like
 * after a lost answer — a `VerityNetworkError` with `outcomeUnknown` and, for a create, the Idempotency-Key (which
 * the SDK may have generated: thrown away with a bare abort, the caller could never learn whether the execution was
 * created). The reason is its `cause`.
 */
function callerAborted(spec: RequestSpec, attempts: number, mayHaveReached: boolean): never {
  const reason: unknown = spec.signal?.reason;
  if (spec.method === 'GET' || !mayHaveReached) throw reason;
  throw new VerityNetworkError({
    method: spec.method,
    path: spec.path,
    attempts,
    outcomeUnknown: true,
    idempotencyKey: spec.headers?.['idempotency-key'],
    cause: reason,
  });
}

/** A backoff between attempts; the caller's abort during it is answered by `callerAborted`. */
async function sleepUnlessAborted(ms: number, spec: RequestSpec, attempts: number, mayHaveReached: boolean) {
  try {
    await sleep(ms, spec.signal);
  } catch {
    callerAborted(spec, attempts, mayHaveReached);
  }
}

function isRetryableAnswer(error: VerityError): boolean {
  if (error.retryAfterMs !== undefined && error.retryAfterMs > MAX_RETRY_AFTER_MS) return false;
  // The first attempt of the same Idempotency-Key is still being processed: the replay will follow.
  return RETRYABLE_STATUSES.has(error.status) || error.code === IN_FLIGHT;
}

/** Typed as a known code, so a code the API renames or drops fails to compile here. */
const IN_FLIGHT: KnownProblemCode = 'idempotency-key-in-flight';

function parseJson<T>(text: string, status: number, effect: { outcomeUnknown: boolean; idempotencyKey?: string }): T {
  if (!text) return undefined as T;
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new VerityServerError(
      {
        type: 'about:blank',
        title: 'Malformed response',
        status,
        detail: `a ${status} response whose body is not JSON: ${text.slice(0, 200)}`,
      },
      effect,
    );
  }
}

/**
 * An id as one path segment. `encodeURIComponent` leaves `.` and `..` as they are, and the URL parser then resolves them
 * as dot segments: `get('..')` would ask `/v1/events`. Such an id (or an empty one) names nothing and is refused here,
 * before any request, with a RangeError.
 */
export function pathSegment(id: string): string {
  if (id === '' || id === '.' || id === '..' || !wellFormed(id)) {
    throw new RangeError(`${JSON.stringify(id)} is not an id`);
  }
  return encodeURIComponent(id);
}

/** No UTF-16 surrogate without its pair: encodeURIComponent throws a URIError on one, and a URL writes it as U+FFFD. */
function wellFormed(text: string): boolean {
  return !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(text);
}

/** Exponential backoff with jitter: base, 2·base, 4·base … each ±25 %. */
export function backoff(baseMs: number, attempt: number): number {
  const delay = baseMs * 2 ** (attempt - 1);
  return Math.round(delay * (0.75 + Math.random() * 0.5));
}

/** Sleeps, or rejects with the signal's reason when it aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
