import { CanActivate, ExecutionContext, Injectable } from '@nestjs/common';
import { ROUTE_ARGS_METADATA } from '@nestjs/common/constants';
import { RouteParamtypes } from '@nestjs/common/enums/route-paramtypes.enum';
import type { Request } from 'express';
import { READS_JSON_BODY, refuseBody } from './parse';

/**
 * Unknown fields are rejected, never dropped — in a body too. A /v1 route that reads no body (no `@Body()`, no
 * `JsonBody`) answered as if the body were not there: `DELETE /v1/admin/connector-settings/http` with
 * `{ "dry_run": true }` cleared the connector's allowlist, caps and secrets, and the caller learnt nothing of its
 * mistake. Such a body is refused (400 `no_body`, as retry and recheck refuse theirs) before the handler runs; no body,
 * or an empty object, passes. Routes that read a body check it themselves.
 */
@Injectable()
export class RefuseUnreadBody implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const req = context.switchToHttp().getRequest<Request>();
    if (/^\/v1(\/|$)/.test(req.path) && !readsBody(context)) refuseBody(req, req.body, `${req.method} ${req.path}`);
    return true;
  }
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
