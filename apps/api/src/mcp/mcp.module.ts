import { Module } from '@nestjs/common';
import { McpController } from './mcp.controller';

/** The MCP endpoint (/mcp). It holds no state and needs no provider: its tools go through the REST API. */
@Module({ controllers: [McpController] })
export class McpModule {}
