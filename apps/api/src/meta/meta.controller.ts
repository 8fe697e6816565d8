import { Controller, Get } from '@nestjs/common';
import { ApiBearerAuth, ApiOkResponse, ApiOperation, ApiTags } from '@nestjs/swagger';
import { ConnectorRegistry } from '@verity/connectors';
import { statusModelDocument } from '@verity/status-model';
import { Public } from '../auth/principal';
import { ApiProblems, schemaRef } from '../openapi';

@ApiTags('catalogue')
@Controller('v1')
export class MetaController {
  constructor(private readonly connectors: ConnectorRegistry) {}

  @Get('connectors')
  @ApiBearerAuth()
  @ApiOperation({ summary: 'Each connector: actions, params schema, read-back, idempotency, reversible' })
  @ApiOkResponse({ schema: schemaRef('ConnectorList') })
  @ApiProblems(401, 429)
  list() {
    return { data: this.connectors.describe() };
  }

  @Get('status-model')
  @Public()
  @ApiOperation({ summary: 'The state tables and retry rules, generated from libs/status-model (no key needed)' })
  @ApiOkResponse({ schema: schemaRef('StatusModel') })
  statusModel() {
    return statusModelDocument();
  }
}
