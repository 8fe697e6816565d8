import { Controller, applyDecorators } from '@nestjs/common';
import { ApiBearerAuth, ApiTags } from '@nestjs/swagger';
import { Roles } from '../auth/principal';

/** A controller of the tenant's admin API: under /v1/admin, for admin keys only, listed under `admin` in the document. */
export function AdminController(path: string) {
  // Applied last first, as the same stack of decorators written in this order would be.
  return applyDecorators(
    ...[ApiTags('admin'), ApiBearerAuth(), Roles('admin'), Controller(`v1/admin/${path}`)].reverse(),
  );
}
