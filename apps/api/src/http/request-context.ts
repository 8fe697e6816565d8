import type { Logger } from '@verity/platform';
import type { NextFunction, Request, Response } from 'express';
import { randomUUID } from 'node:crypto';
import type { Principal } from '../auth/principal';
import { httpDuration } from '../metrics/metrics';

/**
 * Probes, static assets (Swagger UI, Bull Board, the console) and the console's polling of its queues log at debug:
 * they would drown the requests that matter.
 */
const QUIET = /^\/(health|metrics)(\/|$)|^\/admin\/queues\/static\/|^\/docs\/.|^\/console(\/|$)/;
const QUIET_READS = /^\/v1\/review\//;

/**
 * The first express layer: a request id on every request and response (also those the body parser refuses, which
 * never reach Nest), and one structured log line per request. The line carries ids (request, execution, operation,
 * tenant, key id), never the Authorization header, the body or the key.
 */
export function requestContext(logger: Logger) {
  return (req: Request, res: Response, next: NextFunction): void => {
    const incoming = req.headers['x-request-id'];
    const requestId = typeof incoming === 'string' && /^[\w.:-]{1,100}$/.test(incoming) ? incoming : randomUUID();
    req.headers['x-request-id'] = requestId;
    res.setHeader('x-request-id', requestId);
    const started = process.hrtime.bigint();
    res.on('finish', () => {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      const route = routeOf(req);
      httpDuration.observe({ method: req.method, route, status: String(res.statusCode) }, seconds);
      const principal = (req as Request & { principal?: Principal }).principal;
      const locals = res.locals as { executionId?: string; operationId?: string; problem?: string };
      const path = req.originalUrl.split('?')[0];
      const line = {
        requestId,
        method: req.method,
        route,
        path,
        status: res.statusCode,
        ms: Math.round(seconds * 1000),
        executionId: locals.executionId ?? /\b(exe_[0-9a-z]+)/.exec(path)?.[1],
        operationId: locals.operationId ?? /\b(op_[0-9a-z]+)/.exec(path)?.[1],
        tenantId: principal?.tenantId,
        keyId: principal?.keyId,
        problem: locals.problem,
      };
      if (res.statusCode >= 500) logger.warn(line, 'request');
      else if (QUIET.test(path) || (req.method === 'GET' && QUIET_READS.test(path))) logger.debug(line, 'request');
      else logger.info(line, 'request');
    });
    next();
  };
}

/** The route pattern, never the concrete path: metric labels must not grow with every id. */
function routeOf(req: Request): string {
  const path = (req.route as { path?: unknown } | undefined)?.path;
  if (typeof path === 'string') return `${req.baseUrl}${path}`;
  if (req.originalUrl.startsWith('/admin/queues')) return '/admin/queues';
  if (req.originalUrl.startsWith('/docs')) return '/docs';
  if (req.originalUrl.startsWith('/console')) return '/console';
  return 'unmatched';
}
