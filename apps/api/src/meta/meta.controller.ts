import { Controller, Get } from '@nestjs/common';
import { ApiBearerAuth, ApiOperation, ApiTags } from '@nestjs/swagger';
import { ConnectorRegistry } from '@verity/connectors';
import { statusModelDocument } from '@verity/status-model';
import { Public } from '../auth/principal';

@ApiTags('catalogue')
@Controller('v1')
export class MetaController {
  constructor(private readonly connectors: ConnectorRegistry) {}

  @Get('connectors')
  @ApiBearerAuth()
  @ApiOperation({ summary: 'Each connector: actions, params schema, read-back, idempotency, reversible' })
  list() {
    return { data: this.connectors.describe() };
  }

  @Get('status-model')
  @Public()
  @ApiOperation({ summary: 'The state tables and retry rules, generated from libs/status-model' })
  statusModel() {
    return statusModelDocument();
  }
}
