import { Controller, Get } from '@nestjs/common';
import { ApiBearerAuth, ApiOkResponse, ApiOperation, ApiTags } from '@nestjs/swagger';
import { ConnectorRegistry } from '@verity/connectors';
import { statusModelDocument } from '@verity/status-model';
import { Public } from '../auth/principal';
import { schemaRef } from '../openapi';

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

@ApiTags('catalogue')
@Controller()
export class IndexController {
  @Get()
  @Public()
  @ApiOperation({
    operationId: 'getIndex',
    summary: 'Links to the documentation, the console, health and the API (no key needed)',
  })
  @ApiOkResponse({ schema: schemaRef('Index') })
  root() {
    return INDEX;
  }

  @Get('v1')
  @Public()
  @ApiOperation({
    operationId: 'getApiIndex',
    summary: 'Links to the documentation, the console, health and the API (no key needed)',
  })
  @ApiOkResponse({ schema: schemaRef('Index') })
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
  @ApiOperation({
    operationId: 'listConnectors',
    summary: 'Each connector: actions, params schema, read-back, idempotency, reversible',
  })
  @ApiOkResponse({ schema: schemaRef('ConnectorList') })
  list() {
    return { data: this.connectors.describe() };
  }

  @Get('status-model')
  @Public()
  @ApiOperation({
    operationId: 'getStatusModel',
    summary: 'The state tables and retry rules, generated from libs/status-model (no key needed)',
  })
  @ApiOkResponse({ schema: schemaRef('StatusModel') })
  statusModel() {
    return statusModelDocument();
  }
}
