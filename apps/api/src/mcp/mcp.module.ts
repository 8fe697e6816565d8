import { Module } from '@nestjs/common';
import { McpCancellations } from './mcp-cancellations';
import { McpController } from './mcp.controller';

/**
 * The MCP endpoint (/mcp). It holds no state between requests: its tools go through the REST API. The requests it is
 * answering are known (McpCancellations) so that a client's cancellation, which arrives as a request of its own, stops
 * them.
 */
@Module({ controllers: [McpController], providers: [McpCancellations] })
export class McpModule {}
