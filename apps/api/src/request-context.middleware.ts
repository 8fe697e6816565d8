import { Inject, Injectable, NestMiddleware } from '@nestjs/common';
import { LOGGER, Logger } from '@verity/platform';
import type { NextFunction, Request, Response } from 'express';
import { randomUUID } from 'node:crypto';
import { httpDuration } from './metrics/metrics';

/** A request id on every request and response, and one structured log line per request (keys never logged). */
@Injectable()
export class RequestContextMiddleware implements NestMiddleware {
  constructor(@Inject(LOGGER) private readonly logger: Logger) {}

  use(req: Request, res: Response, next: NextFunction): void {
    const incoming = req.headers['x-request-id'];
    const requestId = typeof incoming === 'string' && /^[\w.-]{1,100}$/.test(incoming) ? incoming : randomUUID();
    req.headers['x-request-id'] = requestId;
    res.setHeader('x-request-id', requestId);
    const started = process.hrtime.bigint();
    res.on('finish', () => {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      const route = (req.route as { path?: string } | undefined)?.path ?? 'unmatched';
      httpDuration.observe({ method: req.method, route, status: String(res.statusCode) }, seconds);
      const ids = idsOf(req.originalUrl);
      this.logger.debug(
        { requestId, method: req.method, route, status: res.statusCode, ms: Math.round(seconds * 1000), ...ids },
        'request',
      );
    });
    next();
  }
}

function idsOf(url: string): { executionId?: string; operationId?: string } {
  const execution = /\b(exe_[a-z0-9]+)/.exec(url);
  const operation = /\b(op_[a-z0-9]+)/.exec(url);
  return { executionId: execution?.[1], operationId: operation?.[1] };
}
