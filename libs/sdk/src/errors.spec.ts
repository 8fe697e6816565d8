import { createServer, IncomingMessage, ServerResponse } from 'node:http';
import { inspect } from 'node:util';
import { Verity } from './client';
import {
  VerityAuthError,
  VerityConflictError,
  VerityError,
  VerityIdempotencyError,
  VerityNetworkError,
  VerityNotFoundError,
  VerityPreconditionFailedError,
  VerityRateLimitError,
  VerityServerError,
  VerityValidationError,
  codeOf,
  errorFromResponse,
  isVerityError,
  parseProblem,
  parseRetryAfter,
} from './errors';
import { LocalServer, serveDuringDescribe } from '../../../test/support/local-server';

const KEY = 'sk-test-secret-key-123';

type Handler = (req: IncomingMessage, res: ServerResponse, body: string) => void;

/** A real HTTP server on a spare port, for the tests of the enclosing describe; each installs the answers it needs. */
function answeringServer(handler: Handler): LocalServer {
  return serveDuringDescribe(() =>
    createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => handler(req, res, Buffer.concat(chunks).toString()));
    }),
  );
}

/** Answers with a problem document of the API's: its type names `code`, its status is the answer's. */
function problem(
  res: ServerResponse,
  status: number,
  code: string,
  members: Record<string, unknown>,
  headers: Record<string, string> = {},
) {
  res.writeHead(status, { 'content-type': 'application/problem+json', ...headers });
  res.end(JSON.stringify({ type: `https://verity.dev/problems/${code}`, status, ...members }));
}

describe('problem parsing', () => {
  it('reads the code from the last segment of the type URL', () => {
    expect(codeOf('https://verity.dev/problems/not-found', 404)).toBe('not-found');
    expect(codeOf('https://verity.dev/problems/retry-not-allowed/', 409)).toBe('retry-not-allowed');
    expect(codeOf('about:blank', 502)).toBe('http-502');
    expect(codeOf(undefined, 500)).toBe('http-500');
  });

  it('keeps the problem as sent, including extension members and field errors', () => {
    const body = {
      type: 'https://verity.dev/problems/validation-error',
      title: 'The request is invalid',
      status: 400,
      detail: 'operations[0].params.amount: Too small',
      instance: '/v1/executions',
      errors: [{ field: 'operations[0].params.amount', rule: 'too_small', message: 'Too small' }],
    };
    const error = errorFromResponse(400, new Headers({ 'x-request-id': 'req_1' }), JSON.stringify(body));
    expect(error).toBeInstanceOf(VerityValidationError);
    expect(error).toBeInstanceOf(VerityError);
    expect(error).toBeInstanceOf(Error);
    expect(error).toMatchObject({ status: 400, code: 'validation-error', title: body.title, detail: body.detail });
    expect(error.instance).toBe('/v1/executions');
    expect(error.errors).toEqual(body.errors);
    expect(error.fieldError('operations[0].params.amount')?.rule).toBe('too_small');
    expect(error.body).toEqual(body);
    expect(error.requestId).toBe('req_1');
    expect(error.message).toBe('400 The request is invalid: operations[0].params.amount: Too small');
  });

  it('maps statuses and codes to subclasses', () => {
    const of = (status: number, code: string) =>
      errorFromResponse(
        status,
        new Headers(),
        JSON.stringify({ type: `https://verity.dev/problems/${code}`, title: 't', status }),
      );
    expect(of(401, 'unauthorized')).toBeInstanceOf(VerityAuthError);
    expect(of(403, 'forbidden')).toBeInstanceOf(VerityAuthError);
    expect(of(404, 'not-found')).toBeInstanceOf(VerityNotFoundError);
    expect(of(409, 'retry-not-allowed')).toBeInstanceOf(VerityConflictError);
    expect(of(409, 'idempotency-key-in-flight')).toBeInstanceOf(VerityConflictError);
    expect(of(422, 'idempotency-key-reused')).toBeInstanceOf(VerityIdempotencyError);
    expect(of(412, 'precondition-failed')).toBeInstanceOf(VerityPreconditionFailedError);
    expect(of(412, 'precondition-failed').name).toBe('VerityPreconditionFailedError');
    expect(of(429, 'rate-limited')).toBeInstanceOf(VerityRateLimitError);
    expect(of(503, 'database-unavailable')).toBeInstanceOf(VerityServerError);
    expect(of(415, 'unsupported-media-type').constructor).toBe(VerityError);
    expect(isVerityError(of(404, 'not-found'), 'not-found')).toBe(true);
    expect(isVerityError(of(404, 'not-found'), 'forbidden')).toBe(false);
    expect(isVerityError(new Error('x'))).toBe(false);
  });

  it('synthesizes a problem from a body that is not one', () => {
    const html = '<html><body>502 Bad Gateway</body></html>';
    const error = errorFromResponse(502, new Headers({ 'retry-after': '3' }), html);
    expect(error).toBeInstanceOf(VerityServerError);
    expect(error).toMatchObject({ status: 502, code: 'http-502', type: 'about:blank', title: 'Bad gateway' });
    expect(error.detail).toBe(html);
    expect(error.errors).toEqual([]);
    expect(error.retryAfterMs).toBe(3000);
    expect(parseProblem(500, '')).toEqual({ type: 'about:blank', title: 'Internal error', status: 500 });
  });

  it('drops malformed field errors rather than trusting them', () => {
    const parsed = parseProblem(
      400,
      JSON.stringify({ type: 'x/validation-error', title: 't', status: 400, errors: [{ field: 'a' }, 'junk'] }),
    );
    expect(parsed.errors).toEqual([]);
  });

  it('parses Retry-After as seconds or a date', () => {
    expect(parseRetryAfter(null)).toBeUndefined();
    expect(parseRetryAfter('5')).toBe(5000);
    expect(parseRetryAfter('soon')).toBeUndefined();
    const inTen = new Date(Date.now() + 10_000).toUTCString();
    expect(parseRetryAfter(inTen)).toBeGreaterThan(8000);
  });
});

describe('errors through a real HTTP server', () => {
  const seen: { method: string; url: string; auth: string | undefined }[] = [];
  let answer: Handler = (_req, res) => res.end();
  const server = answeringServer((req, res, body) => {
    seen.push({ method: req.method!, url: req.url!, auth: req.headers.authorization });
    answer(req, res, body);
  });
  beforeEach(() => {
    seen.length = 0;
  });

  const client = () => new Verity({ baseUrl: server.url, apiKey: KEY, backoffMs: 5 });

  /**
   * Answers the next request with a 503 problem `code` (Retry-After 0), and each one after it as `then` does; counts
   * the requests from now on.
   */
  function unavailableOnce(code: string, members: Record<string, unknown>, then: Handler) {
    const requests = { count: 0 };
    answer = (req, res, body) => {
      requests.count += 1;
      if (requests.count === 1) problem(res, 503, code, members, { 'retry-after': '0' });
      else then(req, res, body);
    };
    return requests;
  }

  it('rejects with a typed 404 and sends the key only in the Authorization header', async () => {
    answer = (req, res) =>
      problem(res, 404, 'not-found', {
        title: 'Execution not found',
        detail: 'no execution exe_nope is visible to this key',
        instance: req.url,
      });
    const error = await client()
      .get('exe_nope')
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(VerityNotFoundError);
    expect(error).toMatchObject({ status: 404, code: 'not-found', instance: '/v1/executions/exe_nope' });
    expect(seen).toEqual([{ method: 'GET', url: '/v1/executions/exe_nope', auth: `Bearer ${KEY}` }]);
    const err = error as VerityError;
    expect(`${err.message} ${JSON.stringify(err.body)} ${inspect(err)}`).not.toContain(KEY);
  });

  it('exposes the conflict rule of a 409 and never retries the POST', async () => {
    answer = (_req, res) =>
      problem(res, 409, 'retry-not-allowed', {
        title: 'Conflict with the current state',
        detail: 'retry is not_needed for an operation in VERIFIED',
        status_of_operation: 'VERIFIED',
        retry: 'not_needed',
      });
    const error = (await client()
      .operations.retry('op_1')
      .catch((e: unknown) => e)) as VerityConflictError;
    expect(error).toBeInstanceOf(VerityConflictError);
    expect(error.code).toBe('retry-not-allowed');
    expect(error.body.retry).toBe('not_needed');
    expect(seen).toHaveLength(1);
  });

  it('retries a GET on 503 with Retry-After, but never a POST with an effect', async () => {
    const emptyPage: Handler = (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ data: [], next_cursor: null }));
    };
    unavailableOnce('database-unavailable', { title: 'x' }, emptyPage);
    await expect(client().executions.list({ limit: 5 })).resolves.toEqual({ data: [], next_cursor: null });
    expect(seen.map((s) => s.url)).toEqual(['/v1/executions?limit=5', '/v1/executions?limit=5']);

    seen.length = 0;
    unavailableOnce('database-unavailable', { title: 'x' }, emptyPage);
    await expect(client().executions.cancel('exe_1', { reason: 'stop' })).rejects.toBeInstanceOf(VerityServerError);
    expect(seen).toHaveLength(1);
  });

  it('gives the problem of a retried 503 when the later attempts get no answer, instead of "no response" alone', async () => {
    const requests = unavailableOnce(
      'secrets-unreadable',
      { title: 'Secrets unreadable', detail: "the tenant's secrets do not open with this process' key" },
      (req) => req.socket.destroy(),
    );
    const error = await client()
      .executions.list({ limit: 5 })
      .catch((e: unknown) => e);
    expect(requests.count).toBe(3);
    // The last attempt got no answer: still a network error, which now carries the answer an earlier one got.
    expect(error).toBeInstanceOf(VerityNetworkError);
    const { lastAnswer, message, attempts } = error as VerityNetworkError;
    expect(attempts).toBe(3);
    expect(lastAnswer).toBeInstanceOf(VerityServerError);
    expect(lastAnswer).toMatchObject({
      status: 503,
      code: 'secrets-unreadable',
      detail: "the tenant's secrets do not open with this process' key",
    });
    expect(message).not.toContain('no response after 3 attempts');
    expect(message).toContain("attempt 1 answered 503 Secrets unreadable: the tenant's secrets do not open");
  });

  it('does not hold the key where it could leak', () => {
    const dx = client();
    expect(JSON.stringify(dx)).not.toContain(KEY);
    expect(inspect(dx, { depth: 10, showHidden: true })).not.toContain(KEY);
  });
});
