import { Controller, Delete, Get, Post, Req, Res } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { ApiBearerAuth, ApiOperation, ApiTags } from '@nestjs/swagger';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { Verity } from '@verity/sdk';
import { createVerityMcpServer } from '@verity/sdk/mcp';
import type { Request, Response } from 'express';
import type { AddressInfo } from 'node:net';
import { bearerToken } from '../auth/auth.guard';
import { ApiProblems } from '../openapi';
import { Problem } from '../problem/problem';

/**
 * The MCP server over Streamable HTTP, stateless: every POST is one JSON-RPC exchange with a fresh server, so any
 * API process can answer any request and nothing is kept between them. The global AuthGuard has already checked
 * the Bearer key exactly as for /v1 (unknown key 401, operator key 403, rate limit); the tools then call this
 * API's own REST endpoints through the SDK with the same key, so its tenant, role and every /v1 rule apply.
 */
@ApiTags('integrations')
@ApiBearerAuth()
@Controller('mcp')
export class McpController {
  constructor(private readonly adapterHost: HttpAdapterHost) {}

  @Post()
  @ApiOperation({
    summary: 'MCP (Streamable HTTP, stateless): tools and execution resources for agents',
    description:
      'JSON-RPC 2.0 per the Model Context Protocol. Tools: list_connectors, submit_execution, get_execution, ' +
      'wait_for_execution, cancel_execution, get_operation; resources verity://executions/{id}. The key’s tenant ' +
      'and role apply as on /v1.',
  })
  @ApiProblems(401, 403, 429)
  async post(@Req() req: Request, @Res() res: Response): Promise<void> {
    const client = new Verity({
      baseUrl: this.selfUrl(),
      // The guard let the request in, so it carries a Bearer key.
      apiKey: bearerToken(req) ?? '',
      userAgent: 'verity-mcp-http',
      // One attempt: a loopback call that fails will not do better by repeating, and the agent sees the error.
      maxAttempts: 1,
    });
    const mcp = createVerityMcpServer({ client });
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on('close', () => {
      mcp.close();
      void transport.close();
      void mcp.server.close();
    });
    await mcp.server.connect(transport);
    await transport.handleRequest(req, res, req.body);
  }

  @Get()
  @ApiOperation({ summary: 'Not offered: a stateless server has no stream of its own to push on (405)' })
  get(): never {
    throw notAllowed();
  }

  @Delete()
  @ApiOperation({ summary: 'Not offered: there are no sessions to end (405)' })
  delete(): never {
    throw notAllowed();
  }

  /** This process's own listening address: the MCP tools reach the REST API through it. */
  private selfUrl(): string {
    const address = this.adapterHost.httpAdapter.getHttpServer().address() as AddressInfo;
    const host =
      address.address === '0.0.0.0' ? '127.0.0.1' : address.address === '::' ? '[::1]' : hostLiteral(address.address);
    return `http://${host}:${address.port}`;
  }
}

function hostLiteral(address: string): string {
  return address.includes(':') ? `[${address}]` : address;
}

function notAllowed(): Problem {
  return new Problem(
    405,
    'method-not-allowed',
    'Method not allowed',
    'this MCP server is stateless: send each JSON-RPC message as a POST; there is no server-initiated stream or session',
    {},
    { allow: 'POST' },
  );
}
