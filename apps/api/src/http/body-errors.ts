import type { NextFunction, Request, Response } from 'express';
import { JSON_RPC_CODE, refuseBody } from '../mcp/json-rpc-error';
import { Problem } from '../problem/problem';

export const BODY_LIMIT_BYTES = 256 * 1024;

interface BodyParserError {
  type?: unknown;
  /** The raw body, which body-parser attaches to a parse failure. */
  body?: unknown;
  /** Ours (verifyJsonBytes): the member named twice, or holding a number a double cannot keep. */
  field?: unknown;
  status?: unknown;
  code?: unknown;
  errno?: unknown;
}

const ZLIB_CODE = /^(Z_|ERR_(ZLIB|BROTLI)|ERR__ERROR_)/;

/**
 * body-parser's refusals (bad JSON, too large, unsupported charset...) as problems. They happen before Nest routes
 * the request, so without this they would reach Nest's fallback handler and lose their field and rule.
 */
export function bodyParserProblem(error: unknown): Problem | null {
  const e = error as BodyParserError | null;
  if (!e || typeof e.status !== 'number') return null;
  // A body that says it is gzip (or deflate, br) but is not: zlib's error, passed on by body-parser as a 400. Every
  // zlib error carries a numeric errno; Brotli's codes are its own (ERR__ERROR_FORMAT_PADDING_2, ...), not Z_*.
  if (e.type === undefined && typeof e.code === 'string' && (typeof e.errno === 'number' || ZLIB_CODE.test(e.code))) {
    return Problem.validation([
      {
        field: '(body)',
        rule: 'content_encoding',
        message: 'the body does not match its Content-Encoding (it could not be decompressed)',
      },
    ]);
  }
  if (typeof e.type !== 'string') return null;
  switch (e.type) {
    case 'entity.utf8.invalid':
      return Problem.validation([{ field: '(body)', rule: 'utf8', message: 'the body is not valid UTF-8' }]);
    case 'entity.duplicate.key': {
      const field = typeof e.field === 'string' ? e.field : '(body)';
      return Problem.validation([
        { field, rule: 'duplicate_key', message: 'given twice in one object: which one counts would be a guess' },
      ]);
    }
    case 'entity.inexact.number': {
      const field = typeof e.field === 'string' ? e.field : '(body)';
      return Problem.validation([
        {
          field,
          rule: 'exact_number',
          message:
            'more digits than a number can keep here (beyond 2^53 for whole numbers, about 17 significant digits ' +
            'otherwise): it would be stored and sent rounded; send it as a string if the target accepts one',
        },
      ]);
    }
    case 'entity.parse.failed':
      return Problem.validation([{ field: '(body)', rule: 'json', message: notJsonMessage(e.body) }]);
    case 'entity.too.large':
      return new Problem(
        413,
        'payload-too-large',
        'The request body is too large',
        `the body limit is ${BODY_LIMIT_BYTES / 1024} KiB`,
        { errors: [{ field: '(body)', rule: 'max_bytes', message: `at most ${BODY_LIMIT_BYTES} bytes` }] },
      );
    case 'charset.unsupported':
    case 'encoding.unsupported':
      return unsupportedEncoding();
    default:
      return e.status >= 400 && e.status < 500
        ? new Problem(e.status, 'bad-request', 'The request body could not be read', e.type)
        : null;
  }
}

/** 415 for a body in a content coding the API does not undo (it takes gzip, deflate and br). */
export function unsupportedEncoding(): Problem {
  return new Problem(
    415,
    'unsupported-media-type',
    'Unsupported encoding',
    'send UTF-8 JSON, uncompressed or as gzip, deflate or br',
  );
}

/**
 * The parser is strict (an object or an array at the top): `null`, `"hello"` or `5` are valid JSON it refuses, and
 * "not valid JSON" would send the caller looking for a syntax error that is not there.
 */
function notJsonMessage(body: unknown): string {
  if (typeof body === 'string') {
    try {
      const value: unknown = JSON.parse(body);
      return `the body must be a JSON object, not ${value === null ? 'null' : `a JSON ${typeof value}`}`;
    } catch {
      // Not JSON at all.
    }
  }
  return 'the body is not valid JSON';
}

/**
 * What JSON-RPC calls the body-parser's refusals of valid JSON (a member given twice, a number a double would round):
 * no Parse error, a request no method may receive.
 */
const REFUSED_VALID_JSON = new Set(['entity.duplicate.key', 'entity.inexact.number']);

/**
 * Express error middleware placed right after the body parser. On the MCP endpoint a body that cannot be read as JSON
 * (400) is JSON-RPC's Parse error, and valid JSON refused for one of its members Invalid Request (with the request's id
 * where it can be determined); one refused as too large or in another encoding, the transport's own error code.
 */
export function bodyErrorHandler(error: unknown, req: Request, res: Response, next: NextFunction): void {
  const problem = bodyParserProblem(error);
  if (!problem) {
    next(error);
    return;
  }
  const e = error as BodyParserError;
  if (REFUSED_VALID_JSON.has(e.type as string)) {
    refuseBody(req, res, problem, JSON_RPC_CODE.invalidRequest, e.body);
    return;
  }
  refuseBody(req, res, problem, problem.status === 400 ? JSON_RPC_CODE.parseError : JSON_RPC_CODE.transport);
}
