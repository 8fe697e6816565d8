import { SetMetadata, createParamDecorator, ExecutionContext } from '@nestjs/common';
import type { Role } from '@verity/persistence';

export interface Principal {
  keyId: string;
  tenantId: string;
  role: Role;
}

export const ROLES_KEY = 'verity:roles';
export const PUBLIC_KEY = 'verity:public';

/** Which roles may call an endpoint (admin may always). */
export const Roles = (...roles: Role[]) => SetMetadata(ROLES_KEY, roles);
export const Public = () => SetMetadata(PUBLIC_KEY, true);

export const CurrentPrincipal = createParamDecorator((_: unknown, ctx: ExecutionContext): Principal => {
  return ctx.switchToHttp().getRequest<{ principal: Principal }>().principal;
});
