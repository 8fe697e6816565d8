import { SetMetadata, applyDecorators, createParamDecorator, ExecutionContext } from '@nestjs/common';
import type { Role } from '@verity/persistence';
import { ApiProblems } from '../openapi';

/** A tenant's key: everything under /v1 works on this tenant's data only. */
export interface Principal {
  keyId: string;
  tenantId: string;
  role: Role;
}

/** The platform operator's key: Bull Board and /metrics. It belongs to no tenant, so it reads no tenant's /v1 data. */
export interface OperatorPrincipal {
  keyId: string;
  tenantId: null;
  role: 'operator';
}

export type AnyPrincipal = Principal | OperatorPrincipal;

export const ROLES_KEY = 'verity:roles';
export const PUBLIC_KEY = 'verity:public';

/**
 * Which roles may call an endpoint (admin may always). The document says so too: a key of another role gets 403
 * `forbidden`.
 */
export const Roles = (...roles: Role[]) => applyDecorators(SetMetadata(ROLES_KEY, roles), ApiProblems('forbidden'));
export const Public = () => SetMetadata(PUBLIC_KEY, true);

export const DECISION_KEY = 'verity:decision';
/**
 * A person's decision on an operation (approve or deny, resolve a hold): the reviewer's alone — an admin may do
 * everything else of its tenant, submitting included, and one key that could both ask for a send and approve it would
 * make the approval no second pair of eyes. A key of any other role gets 403 `forbidden`.
 */
export const ReviewerDecision = () =>
  applyDecorators(SetMetadata(ROLES_KEY, ['reviewer']), SetMetadata(DECISION_KEY, true), ApiProblems('forbidden'));

export const CurrentPrincipal = createParamDecorator((_: unknown, ctx: ExecutionContext): Principal => {
  return ctx.switchToHttp().getRequest<{ principal: Principal }>().principal;
});
