import { Module } from '@nestjs/common';
import { McpCancellations } from './mcp-cancellations';
import { McpInFlight } from './mcp-in-flight';
import { McpWaits } from './mcp-waits';
import { McpController } from './mcp.controller';

/**
 * The MCP endpoint (/mcp). It holds no state between requests: its tools go through the REST API. The requests it is
 * answering are known (McpCancellations) so that a client's cancellation, which arrives as a request of its own, stops
 * them, and counted per key, per tenant and in all (McpInFlight) so that no key, and no tenant, holds more of them at
 * once than its share of what the process can carry. A POST (or its CORS preflight) from a browser page of an origin
 * not allowed is refused before anything else (McpOriginCheck, mounted in main.ts ahead of the body checks), and an
 * allowed one may read the answer; GET and DELETE only ever answer 405. At a stop, the waits in flight answer first with
 * the current state (McpWaits).
 */
@Module({ controllers: [McpController], providers: [McpCancellations, McpInFlight, McpWaits] })
export class McpModule {}
