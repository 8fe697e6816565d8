import { ArgumentsHost, Catch, ExceptionFilter, HttpException, Inject } from '@nestjs/common';
import { IllegalTransitionError } from '@verity/status-model';
import { KeyRevokedError, SecretUnreadableError, isDatabaseUnavailable, isQueryTimeout } from '@verity/persistence';
import { LOGGER, Logger, OutageLog } from '@verity/platform';
import type { Request, Response } from 'express';
import { STATUS_CODES } from 'node:http';
import { bodyParserProblem } from '../http/body-errors';
import { RouteMethods } from '../http/route-methods';
import { Problem, sendProblem } from './problem';

/** Maps every error to application/problem+json. No stack traces or internal fields ever leave the process. */
@Catch()
export class ProblemFilter implements ExceptionFilter {
  /**
   * Postgres away (down, refusing sessions, not answering): every request meanwhile is answered 503
   * database-unavailable, and one line says so — not one error line per request — then one a minute while it lasts.
   */
  private readonly databaseOutage = new OutageLog();
  /** Redis away for a request that is only a job (a re-check): logged the same way. */
  private readonly queueOutage = new OutageLog();

  constructor(
    @Inject(LOGGER) private readonly logger: Logger,
    private readonly routes: RouteMethods,
  ) {}

  catch(error: unknown, host: ArgumentsHost): void {
    const http = host.switchToHttp();
    const res = http.getResponse<Response>();
    const req = http.getRequest<Request>();
    const problem = this.toProblem(error, req);
    if (problem.code === 'database-unavailable') {
      const note = this.databaseOutage.failed();
      if (note) {
        this.logger.error(
          { err: error, requestId: req.headers['x-request-id'], path: req.path, unlogged: note.unlogged },
          'database unavailable: answering 503 database-unavailable (logged again at most once a minute while it lasts)',
        );
      }
    } else if (problem.code === 'queue-unavailable') {
      const note = this.queueOutage.failed();
      if (note) {
        this.logger.error(
          { err: problem.cause, requestId: req.headers['x-request-id'], path: req.path, unlogged: note.unlogged },
          'job queue unavailable: answering 503 queue-unavailable (logged again at most once a minute while it lasts)',
        );
      }
    } else if (problem.status >= 500) {
      this.logger.error({ err: error, requestId: req.headers['x-request-id'], path: req.path }, 'request failed');
    }
    sendProblem(req, res, problem);
  }

  private toProblem(error: unknown, req: Request): Problem {
    if (error instanceof Problem) return error;
    // A change whose key was revoked after the request was admitted, before the change was written.
    if (error instanceof KeyRevokedError) return Problem.keyRevokedMidRequest();
    if (error instanceof IllegalTransitionError) {
      return Problem.conflict('illegal-transition', error.message, {
        rule: error.code,
        from: error.from,
        to: error.to,
      });
    }
    // The tenant's secrets, read to redact the answer (RedactSecretValues) or at intake, do not open here.
    if (error instanceof SecretUnreadableError) {
      return Problem.secretsUnreadable(req.method !== 'GET' && req.method !== 'HEAD');
    }
    const parser = bodyParserProblem(error);
    if (parser) return parser;
    if (error instanceof HttpException) {
      const status = error.getStatus();
      if (status === 404) {
        // No route took the request. Where a route has the path with other methods the resource exists: 405 and the
        // methods it takes (RFC 9110), not a 404 that reads as "no such execution".
        const allowed = this.routes.allowedAt(req.path);
        if (allowed) {
          return new Problem(
            405,
            'method-not-allowed',
            'Method not allowed',
            `${req.method} is not a method of ${req.path}; it takes ${allowed.join(', ')}`,
            {},
            { allow: allowed.join(', ') },
          );
        }
        return new Problem(404, 'not-found', 'Not found', `no route ${req.method} ${req.path}`);
      }
      // Nest maps a few express errors (bad percent-encoding in the path, for one) to HttpExceptions.
      const title = STATUS_CODES[status] ?? 'Error';
      return new Problem(
        status,
        status < 500 ? 'bad-request' : 'internal',
        title,
        status < 500 ? error.message : undefined,
      );
    }
    if (isDatabaseUnavailable(error)) {
      return Problem.unavailable(isQueryTimeout(error) && !['GET', 'HEAD'].includes(req.method));
    }
    return new Problem(500, 'internal', 'Internal error', 'an unexpected error occurred; it has been logged');
  }
}
