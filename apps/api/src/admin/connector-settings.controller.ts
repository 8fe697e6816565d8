import { Body, Controller, Delete, Get, HttpCode, Param, Put, Req } from '@nestjs/common';
import {
  ApiBearerAuth,
  ApiBody,
  ApiNoContentResponse,
  ApiOkResponse,
  ApiOperation,
  ApiParam,
  ApiTags,
} from '@nestjs/swagger';
import { ConnectorSettingsInputSchema } from '@verity/connectors';
import type { Request } from 'express';
import { z } from 'zod';
import { CurrentPrincipal, Principal, Roles } from '../auth/principal';
import { parseBody, requireJson } from '../http/parse';
import { CONNECTOR_SETTINGS_EXAMPLE } from '../openapi-examples';
import { ApiProblems, jsonExample } from '../openapi';
import { ConnectorSettingsService } from './connector-settings.service';

const CONNECTOR = { name: 'connector', description: 'connector name, e.g. http or sandbox.sms' };

const SettingsView = z.object({
  connector: z.string(),
  allow_hosts: z.array(
    z.object({ host: z.string(), ports: z.array(z.number()).optional(), allow_private: z.boolean().optional() }),
  ),
  spending_caps: z.array(
    z.object({
      period: z.enum(['hour', 'day', 'week', 'month']),
      max_operations: z.number().optional(),
      max_amount: z.number().positive().optional(),
      amount_field: z.string().optional(),
    }),
  ),
  secrets: z.array(z.string()).describe('names only; values are write-only'),
  usage: z.array(
    z.object({ period: z.string(), since: z.string(), operations: z.number(), amount: z.number().nullable() }),
  ),
  updated_at: z.string().nullable(),
  updated_by: z.string().nullable(),
});
const schema = (s: z.ZodType) =>
  z.toJSONSchema(s, { target: 'openapi-3.0', io: 'input', unrepresentable: 'any' }) as never;

/** The tenant's connector settings (admin role). Secrets go in; only their names ever come out. */
@ApiTags('admin')
@ApiBearerAuth()
@Roles('admin')
@Controller('v1/admin/connector-settings')
export class ConnectorSettingsController {
  constructor(private readonly settings: ConnectorSettingsService) {}

  @Get()
  @ApiOperation({
    operationId: 'listConnectorSettings',
    summary: 'Every connector’s settings for this tenant: allowlist, spending caps and usage, secret names',
  })
  @ApiOkResponse({ schema: schema(z.object({ data: z.array(SettingsView) })) })
  @ApiProblems('forbidden')
  list(@CurrentPrincipal() principal: Principal) {
    return this.settings.list(principal);
  }

  @Get(':connector')
  @ApiOperation({
    operationId: 'getConnectorSettings',
    summary: 'One connector’s settings for this tenant (secret names only)',
  })
  @ApiParam(CONNECTOR)
  @ApiOkResponse({ schema: schema(SettingsView) })
  @ApiProblems('forbidden')
  get(@CurrentPrincipal() principal: Principal, @Param('connector') connector: string) {
    return this.settings.get(principal, connector);
  }

  @Put(':connector')
  @ApiOperation({
    operationId: 'setConnectorSettings',
    summary: 'Set a connector’s settings',
    description:
      'Each field given replaces that setting and a field left out is kept. `secrets` merge by name: a value sets ' +
      'the secret, null deletes it. Secret values are never returned by any endpoint.',
  })
  @ApiParam(CONNECTOR)
  @ApiBody({
    schema: schema(ConnectorSettingsInputSchema),
    ...jsonExample('Allow one host, cap a day, set a secret', CONNECTOR_SETTINGS_EXAMPLE),
  })
  @ApiOkResponse({ schema: schema(SettingsView) })
  @ApiProblems('validation-error', 'forbidden')
  put(
    @CurrentPrincipal() principal: Principal,
    @Param('connector') connector: string,
    @Req() req: Request,
    @Body() body: unknown,
  ) {
    requireJson(req);
    return this.settings.put(principal, connector, parseBody(ConnectorSettingsInputSchema, body));
  }

  @Delete(':connector')
  @HttpCode(204)
  @ApiOperation({
    operationId: 'clearConnectorSettings',
    summary: 'Remove every setting and secret of this connector for this tenant',
  })
  @ApiParam(CONNECTOR)
  @ApiNoContentResponse({ description: 'Removed (or there was nothing to remove)' })
  @ApiProblems('forbidden')
  async clear(@CurrentPrincipal() principal: Principal, @Param('connector') connector: string) {
    await this.settings.clear(principal, connector);
  }

  @Delete(':connector/secrets/:name')
  @HttpCode(204)
  @ApiOperation({ operationId: 'deleteConnectorSecret', summary: 'Delete one secret' })
  @ApiParam(CONNECTOR)
  @ApiParam({ name: 'name', description: 'secret name' })
  @ApiNoContentResponse({ description: 'Deleted' })
  @ApiProblems('forbidden')
  async deleteSecret(
    @CurrentPrincipal() principal: Principal,
    @Param('connector') connector: string,
    @Param('name') name: string,
  ) {
    await this.settings.deleteSecret(principal, connector, name);
  }
}
