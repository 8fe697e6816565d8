import { Body, Controller, Get, HttpCode, Param, Post, Req } from '@nestjs/common';
import { ApiBearerAuth, ApiBody, ApiCreatedResponse, ApiOkResponse, ApiOperation, ApiTags } from '@nestjs/swagger';
import { OperationStatus } from '@verity/status-model';
import type { Request } from 'express';
import { z } from 'zod';
import { CurrentPrincipal, Principal, Roles } from '../auth/principal';
import { Problem } from '../problem/problem';
import { requireJson } from '../executions/executions.controller';
import { zodErrors } from '../executions/submission';
import { schemaRef } from '../openapi';
import { OperationsService } from './operations.service';

export const ApprovalBody = z.strictObject({
  decision: z.enum(['approve', 'deny']),
  reason: z.string().max(2000).optional(),
});
export const ResolveBody = z.strictObject({
  status: z.enum([OperationStatus.VERIFIED, OperationStatus.FAILED, OperationStatus.CANCELLED, OperationStatus.SENT]),
  evidence: z.string().trim().min(1, 'evidence text is required').max(10_000),
});

function parseBody<T extends z.ZodType>(schema: T, body: unknown): z.infer<T> {
  const parsed = schema.safeParse(body);
  if (!parsed.success) throw Problem.validation(zodErrors(parsed.error));
  return parsed.data;
}

@ApiTags('operations')
@ApiBearerAuth()
@Controller('v1/operations')
export class OperationsController {
  constructor(private readonly operations: OperationsService) {}

  @Get(':id')
  @ApiOperation({ summary: 'One operation with evidence and its recovery obligation' })
  @ApiOkResponse({ schema: schemaRef('OperationDetail') })
  get(@CurrentPrincipal() principal: Principal, @Param('id') id: string) {
    return this.operations.get(principal, id);
  }

  @Post(':id/approval')
  @HttpCode(200)
  @Roles('reviewer')
  @ApiOperation({ summary: 'Approve or deny an operation that needs approval (reviewer)' })
  @ApiBody({ schema: schemaRef('ApprovalRequest') })
  @ApiOkResponse({ schema: schemaRef('OperationDetail') })
  approval(
    @CurrentPrincipal() principal: Principal,
    @Param('id') id: string,
    @Req() req: Request,
    @Body() body: unknown,
  ) {
    requireJson(req);
    const input = parseBody(ApprovalBody, body);
    return this.operations.decide(principal, id, input.decision, input.reason);
  }

  @Post(':id/resolve')
  @HttpCode(200)
  @Roles('reviewer')
  @ApiOperation({ summary: 'Resolve a MANUAL_REVIEW operation with evidence (reviewer)' })
  @ApiBody({ schema: schemaRef('ResolveRequest') })
  @ApiOkResponse({ schema: schemaRef('OperationDetail') })
  resolve(
    @CurrentPrincipal() principal: Principal,
    @Param('id') id: string,
    @Req() req: Request,
    @Body() body: unknown,
  ) {
    requireJson(req);
    const input = parseBody(ResolveBody, body);
    return this.operations.resolve(principal, id, input.status, input.evidence);
  }

  @Post(':id/retry')
  @HttpCode(201)
  @Roles('agent')
  @ApiOperation({ summary: 'A new operation (retry_of) from a FAILED or CANCELLED one; 409 otherwise' })
  @ApiCreatedResponse({ schema: schemaRef('RetryResult') })
  retry(@CurrentPrincipal() principal: Principal, @Param('id') id: string) {
    return this.operations.retry(principal, id);
  }
}
