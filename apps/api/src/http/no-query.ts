import { CanActivate, ExecutionContext, Injectable } from '@nestjs/common';
import { ROUTE_ARGS_METADATA } from '@nestjs/common/constants';
import { RouteParamtypes } from '@nestjs/common/enums/route-paramtypes.enum';
import type { NextFunction, Request, Response } from 'express';
import { Problem, sendProblem } from '../problem/problem';
import { memberPath } from './text';

/**
 * Unknown fields are rejected, never dropped — in a query too. A /v1 route that reads no query (it has no `@Query()`)
 * used to answer as if the parameters were not there: `GET /v1/admin/webhooks?limit=1` listed every endpoint, and a
 * caller learnt nothing of its typo. Each parameter of such a request is refused (400 `unknown_field`), after the
 * key was checked and before the handler runs. Routes that read a query validate it themselves (parseQuery). The
 * index at `/` takes none, as `/v1` (it answers the same); the probes take none either (`/health/ready?verbose=1` would answer as if a detail had been given); `/metrics` refuses
 * its parameters itself, once the scraper's token was checked (refuseQuery).
 */
@Injectable()
export class RefuseUnreadQuery implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const req = context.switchToHttp().getRequest<Request>();
    if (/^\/((v1|health)(\/|$)|$)/.test(req.path) && !readsQuery(context)) refuseQuery(req);
    return true;
  }
}

/** For an endpoint that takes no query: every parameter given, even empty, is a 400 `unknown_field` naming it. */
export function refuseQuery(req: Request): void {
  const names = Object.keys((req.query ?? {}) as Record<string, unknown>);
  if (names.length === 0) return;
  throw Problem.validation(
    names.map((name) => ({
      field: memberPath('', name),
      rule: 'unknown_field',
      message: `unknown query parameter "${name}": this endpoint takes none (unknown fields are rejected, not ignored)`,
    })),
  );
}

/**
 * Express layer for a document served by a third-party router (the OpenAPI document, `/docs-json` and `/docs-yaml`),
 * which takes no query either: `?version=2025-01` or `?format=yaml` was answered with the current JSON document, as if
 * the parameter had been read. Refused as refuseQuery refuses it, before the router answers.
 */
export function refuseDocumentQuery(req: Request, res: Response, next: NextFunction): void {
  try {
    refuseQuery(req);
  } catch (error) {
    if (!(error instanceof Problem)) throw error;
    sendProblem(req, res, error);
    return;
  }
  next();
}

function readsQuery(context: ExecutionContext): boolean {
  const args = (Reflect.getMetadata(ROUTE_ARGS_METADATA, context.getClass(), context.getHandler().name) ??
    {}) as Record<string, unknown>;
  return Object.keys(args).some((key) => Number(key.split(':')[0]) === Number(RouteParamtypes.QUERY));
}
