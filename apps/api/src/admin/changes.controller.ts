import { Get, Query } from '@nestjs/common';
import { ApiQuery } from '@nestjs/swagger';
import { ADMIN_CHANGE_KINDS } from '@verity/persistence';
import { CurrentPrincipal, Principal } from '../auth/principal';
import { parseQuery } from '../http/parse';
import { ApiEndpoint, ApiPageQuery } from '../openapi';
import { AdminController } from './admin-controller';
import { ChangeList, ChangesQuery } from './changes.schema';
import { ChangesService } from './changes.service';

/**
 * The tenant's history of admin changes (admin role): every change of its policy, of a connector's settings and of
 * its webhook endpoints, who made it, when, and the thing before and after (secret names, never values; never a
 * webhook signing secret). Append-only.
 */
@AdminController('changes')
export class ChangesController {
  constructor(private readonly changes: ChangesService) {}

  @Get()
  @ApiEndpoint({
    id: 'listAdminChanges',
    summary:
      'Every change of this tenant’s policy, connector settings and webhook endpoints, newest first, cursor pagination',
    description:
      'One entry per accepted `PUT /v1/admin/policy`, `PUT /v1/admin/connector-settings/{connector}`, ' +
      '`DELETE /v1/admin/connector-settings/{connector}`, `DELETE …/secrets/{name}`, `POST /v1/admin/webhooks`, ' +
      '`DELETE /v1/admin/webhooks/{id}` and `POST /v1/admin/webhooks/{id}/enable`: `by` (the key id), `at`, and ' +
      '`before` and `after` (`null` for an endpoint not there before a create or after a delete). A refused or failed ' +
      'change leaves no entry. Secret values and webhook signing secrets are never recorded. The delivery worker’s ' +
      'automatic disable of an endpoint is no admin’s change and is not listed.',
    response: { schema: ChangeList },
    problems: ['validation-error'],
  })
  @ApiQuery({ name: 'kind', required: false, enum: [...ADMIN_CHANGE_KINDS] })
  @ApiQuery({
    name: 'connector',
    required: false,
    type: String,
    description:
      'only this connector’s changes; a name no connector has is 400 known_connector, unless this tenant’s history ' +
      'holds changes of it (a connector a later release removed). Only connector settings changes name one: with ' +
      'another `kind` it is 400 only_with_connector_settings',
  })
  @ApiPageQuery()
  list(@CurrentPrincipal() principal: Principal, @Query() query: unknown) {
    return this.changes.list(principal, parseQuery(ChangesQuery, query));
  }
}
