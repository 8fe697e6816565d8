import { Controller, Get } from '@nestjs/common';
import { ApiBearerAuth, ApiTags } from '@nestjs/swagger';
import { ConnectorRegistry } from '@verity/connectors';
import { statusModelDocument } from '@verity/status-model';
import { Public } from '../auth/principal';
import { ApiEndpoint } from '../openapi';

/** Where to go from the root: a first request to `/` or `/v1` answers with links instead of a 404. */
const INDEX = {
  name: 'Verity' as const,
  description:
    'An action runtime for AI agents: the execution status says where the agent stands, each operation status ' +
    'whether its effect really happened (VERIFIED only when read back from the source).',
  links: {
    docs: '/docs',
    openapi: '/docs-json',
    console: '/console',
    health: '/health/ready',
    status_model: '/v1/status-model',
    connectors: '/v1/connectors',
    executions: '/v1/executions',
  },
};
/** `/` and `/v1` answer the same; only the operation id tells them apart. */
const INDEX_DOC = {
  summary: 'Links to the documentation, the console, health and the API (no key needed)',
  response: { schema: 'Index' },
} as const;

@ApiTags('catalogue')
@Controller()
export class IndexController {
  @Get()
  @Public()
  @ApiEndpoint({ id: 'getIndex', ...INDEX_DOC })
  root() {
    return INDEX;
  }

  @Get('v1')
  @Public()
  @ApiEndpoint({ id: 'getApiIndex', ...INDEX_DOC })
  v1() {
    return INDEX;
  }
}

@ApiTags('catalogue')
@Controller('v1')
export class MetaController {
  constructor(private readonly connectors: ConnectorRegistry) {}

  @Get('connectors')
  @ApiBearerAuth()
  @ApiEndpoint({
    id: 'listConnectors',
    summary: 'Each connector: actions, params schema, read-back, idempotency, reversible',
    response: { schema: 'ConnectorList' },
  })
  list() {
    return { data: this.connectors.describe() };
  }

  @Get('status-model')
  @Public()
  @ApiEndpoint({
    id: 'getStatusModel',
    summary: 'The state tables and retry rules, generated from libs/status-model (no key needed)',
    response: { schema: 'StatusModel' },
  })
  statusModel() {
    return statusModelDocument();
  }
}
