import { ArgumentsHost, Catch, ExceptionFilter, HttpException, Inject } from '@nestjs/common';
import { IllegalTransitionError } from '@verity/status-model';
import { isDatabaseUnavailable } from '@verity/persistence';
import { LOGGER, Logger } from '@verity/platform';
import type { Request, Response } from 'express';
import { PROBLEM_BASE, Problem } from './problem';

interface BodyParserError {
  type?: string;
  status?: number;
  expose?: boolean;
}

/** Maps every error to application/problem+json. No stack traces or internal fields ever leave the process. */
@Catch()
export class ProblemFilter implements ExceptionFilter {
  constructor(@Inject(LOGGER) private readonly logger: Logger) {}

  catch(error: unknown, host: ArgumentsHost): void {
    const http = host.switchToHttp();
    const res = http.getResponse<Response>();
    const req = http.getRequest<Request>();
    const problem = this.toProblem(error, req);
    if (problem.status >= 500) {
      this.logger.error({ err: error, requestId: req.headers['x-request-id'], path: req.path }, 'request failed');
    }
    if (res.headersSent) {
      res.end();
      return;
    }
    for (const [name, value] of Object.entries(problem.headers)) res.setHeader(name, value);
    res
      .status(problem.status)
      .type('application/problem+json')
      .send(
        JSON.stringify({
          type: `${PROBLEM_BASE}${problem.code}`,
          title: problem.title,
          status: problem.status,
          detail: problem.detail,
          instance: req.originalUrl?.split('?')[0],
          ...problem.extras,
        }),
      );
  }

  private toProblem(error: unknown, req: Request): Problem {
    if (error instanceof Problem) return error;
    if (error instanceof IllegalTransitionError) {
      return Problem.conflict('illegal-transition', error.message, {
        rule: error.code,
        from: error.from,
        to: error.to,
      });
    }
    const parser = error as BodyParserError;
    if (parser?.type === 'entity.parse.failed') {
      return Problem.validation([{ field: '(body)', rule: 'json', message: 'the body is not valid JSON' }]);
    }
    if (parser?.type === 'entity.too.large') {
      return new Problem(413, 'payload-too-large', 'The request body is too large', 'the body limit is 256 KiB');
    }
    if (parser?.type === 'charset.unsupported' || parser?.type === 'encoding.unsupported') {
      return new Problem(415, 'unsupported-media-type', 'Unsupported encoding', String((error as Error).message));
    }
    if (error instanceof HttpException) {
      const status = error.getStatus();
      if (status === 404) {
        return new Problem(404, 'not-found', 'Not found', `no route ${req.method} ${req.path}`);
      }
      return new Problem(status, `http-${status}`, error.message);
    }
    if (isDatabaseUnavailable(error)) {
      return new Problem(
        503,
        'database-unavailable',
        'Service unavailable',
        'the database cannot be reached',
        {},
        {
          'retry-after': '1',
        },
      );
    }
    return new Problem(500, 'internal', 'Internal error', 'an unexpected error occurred; it has been logged');
  }
}
