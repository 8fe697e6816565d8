import { CanActivate, ExecutionContext, Injectable } from '@nestjs/common';
import { ROUTE_ARGS_METADATA } from '@nestjs/common/constants';
import { RouteParamtypes } from '@nestjs/common/enums/route-paramtypes.enum';
import type { NextFunction, Request, Response } from 'express';
import { Problem, sendProblem } from '../problem/problem';
import { READS_JSON_BODY, refuseBody } from './parse';

/** Methods no route reads a body with: a GET, HEAD or OPTIONS body is refused wherever it is sent. */
const READ_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * Unknown fields are rejected, never dropped — in a body too. A /v1 route that reads no body (no `@Body()`, no
 * `JsonBody`) answered as if the body were not there: `DELETE /v1/admin/connector-settings/http` with
 * `{ "dry_run": true }` cleared the connector's allowlist, caps and secrets, and the caller learnt nothing of its
 * mistake. Such a body is refused (400 `no_body`, as retry and recheck refuse theirs) before the handler runs; no body,
 * or an empty object, passes. Routes that read a body check it themselves. Outside /v1 a read's body is refused too:
 * `GET /health/ready` with `{"verbose":true}` answered 200 as if the member had been read, where `true` (not an object)
 * was a 400.
 */
@Injectable()
export class RefuseUnreadBody implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const req = context.switchToHttp().getRequest<Request>();
    const checked = /^\/v1(\/|$)/.test(req.path) || READ_METHODS.has(req.method);
    if (checked && !readsBody(context)) refuseBody(req, req.body, `${req.method} ${req.path}`);
    return true;
  }
}

/**
 * The same refusal for what Nest does not route (the console, /docs, Bull Board): a body sent with a GET, HEAD or
 * OPTIONS is a 400 `no_body`, not ignored. Mounted after any check of the caller's key, which answers first.
 */
export function refuseReadBody(req: Request, res: Response, next: NextFunction): void {
  if (READ_METHODS.has(req.method)) {
    try {
      refuseBody(req, req.body, `${req.method} ${req.originalUrl.split('?')[0]}`);
    } catch (error) {
      sendProblem(req, res, error as Problem);
      return;
    }
  }
  next();
}

function readsBody(context: ExecutionContext): boolean {
  const handler = context.getHandler();
  if (Reflect.getMetadata(READS_JSON_BODY, handler) === true) return true;
  const args = (Reflect.getMetadata(ROUTE_ARGS_METADATA, context.getClass(), handler.name) ?? {}) as Record<
    string,
    unknown
  >;
  return Object.keys(args).some((key) => Number(key.split(':')[0]) === Number(RouteParamtypes.BODY));
}
