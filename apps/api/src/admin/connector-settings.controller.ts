import { Delete, Get, HttpCode, Param, Put } from '@nestjs/common';
import { ConnectorSettingsInput, ConnectorSettingsInputSchema } from '@verity/connectors';
import { z } from 'zod';
import { CurrentPrincipal, Principal } from '../auth/principal';
import { JsonBody } from '../http/parse';
import { CONNECTOR_SETTINGS_EXAMPLE } from '../openapi-examples';
import { ApiEndpoint } from '../openapi';
import { AdminController } from './admin-controller';
import { amountReadingView } from './amount-reading.schema';
import { ConnectorSettingsService } from './connector-settings.service';

const CONNECTOR = { name: 'connector', description: 'connector name, e.g. http or sandbox.sms' };

const SettingsView = z
  .object({
    connector: z.string(),
    allow_hosts: z.array(
      z.object({
        host: z.string(),
        ports: z.array(z.number()).optional(),
        allow_private: z.boolean().optional(),
        secrets: z
          .array(z.string())
          .optional()
          .describe(
            'the secrets that may be sent to this host (in header values), ["*"] for every one; absent: none (an operation naming another is refused: secret_not_bound)',
          ),
      }),
    ),
    spending_caps: z.array(
      z.object({
        period: z.enum(['hour', 'day', 'week', 'month']),
        max_operations: z.number().optional(),
        max_amount: z.number().positive().optional(),
        ...amountReadingView('the currency of max_amount; absent: amounts of any currency are summed as one unit'),
      }),
    ),
    read_back_binding: z
      .enum(['declared', 'bound'])
      .describe(
        'http: which declared read-backs count ("bound": only one that asks the request\'s own origin and names this effect); "declared" for the others',
      ),
    secrets: z.array(z.string()).describe('names only; values are write-only'),
    usage: z.array(
      z.object({ period: z.string(), since: z.string(), operations: z.number(), amount: z.number().nullable() }),
    ),
    updated_at: z.string().nullable(),
    updated_by: z.string().nullable(),
  })
  .meta({ id: 'ConnectorSettings' });
/** The tenant's connector settings (admin role). Secrets go in; only their names ever come out. */
@AdminController('connector-settings')
export class ConnectorSettingsController {
  constructor(private readonly settings: ConnectorSettingsService) {}

  @Get()
  @ApiEndpoint({
    id: 'listConnectorSettings',
    summary: 'Every connector’s settings for this tenant: allowlist, spending caps and usage, secret names',
    response: { schema: z.object({ data: z.array(SettingsView) }) },
  })
  list(@CurrentPrincipal() principal: Principal) {
    return this.settings.list(principal);
  }

  @Get(':connector')
  @ApiEndpoint({
    id: 'getConnectorSettings',
    summary: 'One connector’s settings for this tenant (secret names only)',
    params: [CONNECTOR],
    response: { schema: SettingsView },
  })
  get(@CurrentPrincipal() principal: Principal, @Param('connector') connector: string) {
    return this.settings.get(principal, connector);
  }

  @Put(':connector')
  @ApiEndpoint({
    id: 'setConnectorSettings',
    summary: 'Set a connector’s settings',
    description:
      'Each field given replaces that setting and a field left out is kept. `secrets` merge by name: a value sets ' +
      'the secret, null deletes it. A body that names no setting (`{}`, or only `"secrets": {}`) is refused (400, ' +
      'rule `no_change`). Secret values are never returned by any endpoint.',
    params: [CONNECTOR],
    body: {
      schema: ConnectorSettingsInputSchema,
      example: {
        summary: 'Allow one host and bind a secret to it, cap a day, bind read-backs, set the secret',
        value: CONNECTOR_SETTINGS_EXAMPLE,
      },
    },
    response: { schema: SettingsView },
    problems: ['validation-error'],
  })
  put(
    @CurrentPrincipal() principal: Principal,
    @Param('connector') connector: string,
    @JsonBody(ConnectorSettingsInputSchema) input: ConnectorSettingsInput,
  ) {
    return this.settings.put(principal, connector, input);
  }

  @Delete(':connector')
  @HttpCode(204)
  @ApiEndpoint({
    id: 'clearConnectorSettings',
    summary: 'Remove every setting and secret of this connector for this tenant',
    params: [CONNECTOR],
    response: { status: 204, description: 'Removed (or there was nothing to remove)' },
  })
  async clear(@CurrentPrincipal() principal: Principal, @Param('connector') connector: string) {
    await this.settings.clear(principal, connector);
  }

  @Delete(':connector/secrets/:name')
  @HttpCode(204)
  @ApiEndpoint({
    id: 'deleteConnectorSecret',
    summary: 'Delete one secret',
    params: [CONNECTOR, { name: 'name', description: 'secret name' }],
    response: { status: 204, description: 'Deleted' },
  })
  async deleteSecret(
    @CurrentPrincipal() principal: Principal,
    @Param('connector') connector: string,
    @Param('name') name: string,
  ) {
    await this.settings.deleteSecret(principal, connector, name);
  }
}
