import { Delete, Get, HttpCode, Param, Put, Req, Res } from '@nestjs/common';
import { ConnectorSettingsInput, ConnectorSettingsInputSchema, MAX_SECRETS_PER_CONNECTOR } from '@verity/connectors';
import type { Request, Response } from 'express';
import { z } from 'zod';
import { CurrentPrincipal, Principal } from '../auth/principal';
import { TakesIfMatch, VERSION_ETAG, answerRead, answerWrite, versionConditionOf } from '../http/if-match';
import { JsonBody } from '../http/parse';
import { CONNECTOR_SETTINGS_EXAMPLE } from '../openapi-examples';
import { ApiEndpoint } from '../openapi';
import { AdminController } from './admin-controller';
import { ConnectorSettingsView } from './connector-settings.schema';
import { ConnectorSettingsService } from './connector-settings.service';

const CONNECTOR = { name: 'connector', description: 'connector name, e.g. http or sandbox.sms' };

/** The tenant's connector settings (admin role). Secrets go in; only their names ever come out. */
@AdminController('connector-settings')
export class ConnectorSettingsController {
  constructor(private readonly settings: ConnectorSettingsService) {}

  @Get()
  @ApiEndpoint({
    id: 'listConnectorSettings',
    summary: 'Every connector’s settings for this tenant: allowlist, spending caps and usage, secret names',
    response: { schema: z.object({ data: z.array(ConnectorSettingsView) }) },
  })
  list(@CurrentPrincipal() principal: Principal) {
    return this.settings.list(principal);
  }

  @Get(':connector')
  @ApiEndpoint({
    id: 'getConnectorSettings',
    summary: 'One connector’s settings for this tenant (secret names only)',
    params: [CONNECTOR],
    response: { schema: ConnectorSettingsView, headers: VERSION_ETAG },
  })
  async get(
    @CurrentPrincipal() principal: Principal,
    @Param('connector') connector: string,
    @Req() req: Request,
    @Res({ passthrough: true }) res: Response,
  ) {
    // The usage shown moves with every send and with time; the version does not.
    return answerRead(req, res, this.settings.get(principal, connector));
  }

  @Put(':connector')
  @ApiEndpoint({
    id: 'setConnectorSettings',
    summary: 'Set a connector’s settings',
    description:
      'Each field given replaces that setting and a field left out is kept. `secrets` merge by name: a value sets ' +
      'the secret, null deletes it. A body that names no setting (`{}`, or only `"secrets": {}`) is refused (400, ' +
      'rule `no_change`). Secret values are never returned by any endpoint. With `If-Match` (the ETag of a GET), ' +
      'the change is made only if the settings are still that version (412 `precondition-failed` otherwise). A ' +
      `tenant holds at most ${MAX_SECRETS_PER_CONNECTOR} secrets per connector: a change that would add past it is refused whole (409 ` +
      '`secret-limit`, nothing written); rotating or deleting is always taken.',
    params: [CONNECTOR],
    body: {
      schema: ConnectorSettingsInputSchema,
      example: {
        summary: 'Allow one host and bind a secret to it, cap a day, bind read-backs, set the secret',
        value: CONNECTOR_SETTINGS_EXAMPLE,
      },
    },
    response: { schema: ConnectorSettingsView, headers: VERSION_ETAG },
    problems: ['validation-error', 'precondition-failed', 'secret-limit'],
  })
  @TakesIfMatch()
  async put(
    @CurrentPrincipal() principal: Principal,
    @Param('connector') connector: string,
    @Req() req: Request,
    @Res({ passthrough: true }) res: Response,
    @JsonBody(ConnectorSettingsInputSchema) input: ConnectorSettingsInput,
  ) {
    return answerWrite(res, this.settings.put(principal, connector, input, versionConditionOf(req)));
  }

  @Delete(':connector')
  @HttpCode(204)
  @ApiEndpoint({
    id: 'clearConnectorSettings',
    summary: 'Remove every setting and secret of this connector for this tenant',
    params: [CONNECTOR],
    response: { status: 204, description: 'Removed (or there was nothing to remove)' },
    problems: ['validation-error', 'precondition-failed'],
  })
  @TakesIfMatch()
  async clear(@CurrentPrincipal() principal: Principal, @Param('connector') connector: string, @Req() req: Request) {
    await this.settings.clear(principal, connector, versionConditionOf(req));
  }

  @Delete(':connector/secrets/:name')
  @HttpCode(204)
  @ApiEndpoint({
    id: 'deleteConnectorSecret',
    summary: 'Delete one secret',
    params: [CONNECTOR, { name: 'name', description: 'secret name' }],
    response: { status: 204, description: 'Deleted' },
    problems: ['validation-error', 'precondition-failed'],
  })
  @TakesIfMatch()
  async deleteSecret(
    @CurrentPrincipal() principal: Principal,
    @Param('connector') connector: string,
    @Param('name') name: string,
    @Req() req: Request,
  ) {
    await this.settings.deleteSecret(principal, connector, name, versionConditionOf(req));
  }
}
