import type { Request, Response } from 'express';
import { textPrefix } from '@verity/status-model';

/** RFC 9457 problem details. One class for every refusal the API makes; the filter renders it. */
export interface FieldError {
  field: string;
  rule: string;
  message: string;
}

const MAX_FIELD_ERRORS = 50;
/** Ours are 30 characters or so; a longer one is quoted in part, so a 404 does not echo kilobytes back. */
const MAX_QUOTED_ID = 100;

/**
 * Every problem code the API sends: the last segment of a problem's `type` URL. The one list: the Problem class takes
 * only these (a new code is a compile error until it is added here), the OpenAPI document's Problem schema lists their
 * URLs as the enum of `type` (so the SDK's generated types carry them), every code has an example in
 * openapi-examples.ts, and docs/api.md lists them (openapi.spec.ts checks both).
 */
export const PROBLEM_CODES = [
  'validation-error',
  'bad-request',
  'unauthorized',
  'forbidden',
  'operator-not-tenant',
  'not-found',
  'method-not-allowed',
  'request-timeout',
  'idempotency-key-in-flight',
  'idempotency-key-target-deleted',
  'idempotency-replay-unavailable',
  'execution-terminal',
  'already-decided',
  'not-awaiting-approval',
  'operation-moved',
  'resolution-not-permitted',
  'effect-exists',
  'not-in-review',
  'cannot-read-back',
  'retry-not-allowed',
  'already-retried',
  'denial-limit-reached',
  'reference-unsettled',
  'illegal-transition',
  'webhook-limit',
  'secret-limit',
  'endpoint-disabled',
  'delivery-pending',
  'precondition-failed',
  'payload-too-large',
  'unsupported-media-type',
  'idempotency-key-reused',
  'rate-limited',
  'too-many-failed-authentications',
  'too-many-streams',
  'too-many-mcp-requests',
  'internal',
  'database-unavailable',
  'queue-unavailable',
  'secrets-unreadable',
  'not-ready',
  'api-stopping',
  'answers-busy',
] as const;

export type ProblemCode = (typeof PROBLEM_CODES)[number];

export class Problem extends Error {
  constructor(
    readonly status: number,
    readonly code: ProblemCode,
    readonly title: string,
    readonly detail?: string,
    readonly extras: Record<string, unknown> = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(detail ?? title);
  }

  /** At most MAX_FIELD_ERRORS are listed: a 100-operation body full of mistakes must not produce a huge answer. */
  static validation(errors: FieldError[], detail?: string): Problem {
    return new Problem(400, 'validation-error', 'The request is invalid', detail ?? describe(errors), {
      errors: errors.slice(0, MAX_FIELD_ERRORS),
    });
  }

  /** The id is the caller's, of any length: quoted up to MAX_QUOTED_ID characters (never half of one). */
  static notFound(what: string, id: string): Problem {
    const quoted = id.length > MAX_QUOTED_ID ? `${textPrefix(id, MAX_QUOTED_ID)}…` : id;
    return new Problem(
      404,
      'not-found',
      `${what} not found`,
      `no ${what.toLowerCase()} ${quoted} is visible to this key`,
    );
  }

  /** 409 with Retry-After: the Idempotency-Key's outcome is not settled yet. */
  static idempotencyKeyInFlight(
    detail = 'a request with this Idempotency-Key is still being processed; retry shortly',
  ) {
    return new Problem(
      409,
      'idempotency-key-in-flight',
      'Conflict with the current state',
      detail,
      {},
      { 'retry-after': '1' },
    );
  }

  /** 422: the Idempotency-Key was first used with another body. */
  static idempotencyKeyReused(): Problem {
    return new Problem(
      422,
      'idempotency-key-reused',
      'Idempotency-Key reused with a different body',
      'this Idempotency-Key was first used with a different request body; use a new key for a new request',
    );
  }

  static conflict(code: ProblemCode, detail: string, extras: Record<string, unknown> = {}): Problem {
    return new Problem(409, code, 'Conflict with the current state', detail, extras);
  }

  /**
   * 409 already-decided: a decision was made first (I13). The detail names the winner — who and when — as its members
   * do, so a reader who sees only the detail (the review console's status line) is told who decided too.
   */
  static alreadyDecided(
    detail: string,
    winner: { decision: string; decided_by?: string; decided_at?: string } & Record<string, unknown>,
  ): Problem {
    const by = winner.decided_by === 'system' ? 'the system' : winner.decided_by;
    const named = [by && `by ${by}`, winner.decided_at && `at ${winner.decided_at}`].filter(Boolean).join(' ');
    return Problem.conflict('already-decided', named ? `${detail} (decided ${named})` : detail, winner);
  }

  /**
   * 401: the key was revoked while this request was under way (admitted before, revoked before its write committed).
   * The write checks the key itself (lockActiveKey, the decision statement's byKey): nothing was written.
   */
  static keyRevokedMidRequest(): Problem {
    return new Problem(
      401,
      'unauthorized',
      'Unauthorized',
      'the API key was revoked while this request was under way; nothing was written',
      {},
      { 'www-authenticate': 'Bearer error="invalid_token"' },
    );
  }

  /**
   * `outcomeUnknown`: a statement of a write was sent and got no answer in time; the database may still carry it out,
   * so the caller is not told that nothing was written.
   */
  static unavailable(outcomeUnknown = false): Problem {
    return new Problem(
      503,
      'database-unavailable',
      'Service unavailable',
      outcomeUnknown
        ? 'the database did not answer in time; the request may still have been recorded: repeat it with the same ' +
            'Idempotency-Key, or read the current state before sending it again'
        : 'the database cannot be reached; nothing was written',
      {},
      { 'retry-after': '1' },
    );
  }

  /**
   * The tenant's connector secrets do not open with this API process's SECRETS_KEY (unset, or not the key they were
   * sealed with): every answer to the tenant is redacted with them, so none is given rather than one unredacted.
   * Another process (or this one, its key set right) can answer. A write (`afterWrite`) may have made its change
   * already — the answer is redacted after the handler ran — a read changed nothing, and its answer says so.
   */
  static secretsUnreadable(afterWrite = false): Problem {
    const outcome = afterWrite
      ? 'a change the request asked for may have been made: read the state, or repeat it with the same ' +
        'Idempotency-Key, once the key is set right'
      : 'nothing was changed: ask again once the key is set right';
    return new Problem(
      503,
      'secrets-unreadable',
      'Service unavailable',
      'this API process cannot open the tenant’s connector secrets (its SECRETS_KEY is not the key they were sealed ' +
        `with), so it gives no answer that could hold one of their values; ${outcome}`,
      {},
      { 'retry-after': '5' },
    );
  }

  /**
   * An MCP POST that arrived once this API process had begun to stop: its tools call back into the API, whose listener
   * may already be closed (each call would end "no answer", an outcome the agent could not tell from a lost write). It
   * is refused whole before anything in it runs; another process (or this one restarted) serves it.
   */
  static stopping(): Problem {
    return new Problem(
      503,
      'api-stopping',
      'Service unavailable',
      'this API process is stopping; nothing in the request was carried out: send it again',
      {},
      { 'retry-after': '1' },
    );
  }

  /**
   * A request that is nothing but Redis could not reach it: a re-check (its job is the request; nothing was asked for)
   * or Bull Board. (A change that is written first answers without Redis: the sweeper owes its job.)
   */
  static queueUnavailable(consequence: string): Problem {
    return new Problem(
      503,
      'queue-unavailable',
      'Service unavailable',
      `the job queue (Redis) cannot be reached: ${consequence}`,
      {},
      { 'retry-after': '1' },
    );
  }
}

function describe(errors: FieldError[]): string {
  const first = errors[0];
  if (!first) return 'invalid request';
  const more = errors.length > 1 ? ` (and ${errors.length - 1} more)` : '';
  return `${first.field}: ${first.message}${more}`;
}

export const PROBLEM_BASE = 'https://verity.dev/problems/';

/** `https://verity.dev/problems/<code>`: a problem's `type`. */
export function problemType(code: ProblemCode): `${typeof PROBLEM_BASE}${ProblemCode}` {
  return `${PROBLEM_BASE}${code}`;
}

/** The one renderer of problem+json, shared by the Nest filter and the plain express layers (body parser, Bull Board). */
export function sendProblem(req: Pick<Request, 'originalUrl'>, res: Response, problem: Problem): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  for (const [name, value] of Object.entries(problem.headers)) res.setHeader(name, value);
  res.locals.problem = problem.code;
  res
    .status(problem.status)
    .type('application/problem+json')
    .send(
      // Extensions first: they can never overwrite the RFC 9457 members (`status` is the HTTP status).
      JSON.stringify({
        ...problem.extras,
        type: problemType(problem.code),
        title: problem.title,
        status: problem.status,
        detail: problem.detail,
        instance: req.originalUrl?.split('?')[0],
      }),
    );
}
