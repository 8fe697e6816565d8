import { Body, Controller, Get, Headers, HttpCode, Param, Post, Query, Req, Res } from '@nestjs/common';
import {
  ApiBearerAuth,
  ApiBody,
  ApiCreatedResponse,
  ApiHeader,
  ApiOkResponse,
  ApiOperation,
  ApiQuery,
  ApiTags,
} from '@nestjs/swagger';
import { EXECUTION_STATUSES, ExecutionStatus } from '@verity/status-model';
import type { Request, Response } from 'express';
import { z } from 'zod';
import { CurrentPrincipal, Principal, Roles } from '../auth/principal';
import { Problem } from '../problem/problem';
import { zodErrors } from './submission';
import { ExecutionsService } from './executions.service';
import { StreamService } from '../stream/stream.service';
import { schemaRef } from '../openapi';

const ListQuery = z.strictObject({
  status: z.enum(EXECUTION_STATUSES as [ExecutionStatus, ...ExecutionStatus[]]).optional(),
  cursor: z.string().max(100).optional(),
  limit: z.coerce.number().int().min(1).max(200).default(50),
});
const EventsQuery = z.strictObject({
  after: z.string().max(100).optional(),
  limit: z.coerce.number().int().min(1).max(1000).default(500),
});
const CancelBody = z.strictObject({ reason: z.string().max(1000).optional() }).optional();

export function parseQuery<T extends z.ZodType>(schema: T, query: unknown): z.infer<T> {
  const parsed = schema.safeParse(query);
  if (!parsed.success) throw Problem.validation(zodErrors(parsed.error));
  return parsed.data;
}

export function requireJson(req: Request): void {
  const type = req.headers['content-type'] ?? '';
  if (!/^application\/([a-z.+-]*\+)?json\b/i.test(type)) {
    throw new Problem(415, 'unsupported-media-type', 'Unsupported media type', 'send Content-Type: application/json');
  }
}

const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

@ApiTags('executions')
@ApiBearerAuth()
@Controller('v1/executions')
export class ExecutionsController {
  constructor(
    private readonly executions: ExecutionsService,
    private readonly streams: StreamService,
  ) {}

  @Post()
  @Roles('agent')
  @ApiOperation({ summary: 'Submit an execution (201 = committed, I7)' })
  @ApiHeader({ name: 'Idempotency-Key', required: false, description: 'up to 255 printable characters, kept 24 h' })
  @ApiBody({ schema: schemaRef('Submission') })
  @ApiCreatedResponse({ schema: schemaRef('Execution') })
  async submit(
    @CurrentPrincipal() principal: Principal,
    @Req() req: Request,
    @Res({ passthrough: true }) res: Response,
    @Body() body: unknown,
    @Headers('idempotency-key') idempotencyKey?: string,
  ) {
    requireJson(req);
    if (idempotencyKey !== undefined && !IDEMPOTENCY_KEY.test(idempotencyKey)) {
      throw Problem.validation([
        { field: 'Idempotency-Key', rule: 'format', message: '1 to 255 printable ASCII characters without spaces' },
      ]);
    }
    const { execution, replayed } = await this.executions.submit(principal, body, idempotencyKey);
    res.status(201);
    res.setHeader('location', `/v1/executions/${execution.id}`);
    if (replayed) res.setHeader('idempotent-replayed', 'true');
    return execution;
  }

  @Get()
  @ApiOperation({ summary: 'List executions, newest first (cursor pagination)' })
  @ApiQuery({ name: 'status', required: false, enum: EXECUTION_STATUSES })
  @ApiQuery({ name: 'cursor', required: false })
  @ApiQuery({ name: 'limit', required: false, schema: { type: 'integer', minimum: 1, maximum: 200 } })
  @ApiOkResponse({ schema: schemaRef('ExecutionList') })
  list(@CurrentPrincipal() principal: Principal, @Query() query: unknown) {
    return this.executions.list(principal, parseQuery(ListQuery, query));
  }

  @Get(':id')
  @ApiOperation({ summary: 'One execution with its operations, effects and failure' })
  @ApiOkResponse({ schema: schemaRef('Execution') })
  get(@CurrentPrincipal() principal: Principal, @Param('id') id: string) {
    return this.executions.get(principal, id);
  }

  @Get(':id/events')
  @ApiOperation({ summary: 'The append-only event log, after an event id' })
  @ApiQuery({ name: 'after', required: false })
  @ApiQuery({ name: 'limit', required: false, schema: { type: 'integer', minimum: 1, maximum: 1000 } })
  @ApiOkResponse({ schema: schemaRef('EventList') })
  events(@CurrentPrincipal() principal: Principal, @Param('id') id: string, @Query() query: unknown) {
    const q = parseQuery(EventsQuery, query);
    return this.executions.events(principal, id, q.after, q.limit);
  }

  @Post(':id/cancel')
  @HttpCode(200)
  @Roles('agent', 'reviewer')
  @ApiOperation({ summary: 'Cancel: PREPARED operations become CANCELLED; SENT ones keep being reconciled' })
  @ApiOkResponse({ schema: schemaRef('Execution') })
  cancel(@CurrentPrincipal() principal: Principal, @Param('id') id: string, @Body() body: unknown) {
    const parsed = CancelBody.safeParse(
      body && typeof body === 'object' && Object.keys(body).length ? body : undefined,
    );
    if (!parsed.success) throw Problem.validation(zodErrors(parsed.error));
    return this.executions.cancel(principal, id, parsed.data?.reason);
  }

  @Get(':id/stream')
  @ApiOperation({ summary: 'Server-sent events; resumes from Last-Event-ID; ends when everything has settled' })
  @ApiHeader({ name: 'Last-Event-ID', required: false })
  async stream(
    @CurrentPrincipal() principal: Principal,
    @Param('id') id: string,
    @Req() req: Request,
    @Res() res: Response,
    @Query('after') after?: string,
  ) {
    const lastEventId = (req.headers['last-event-id'] as string | undefined) ?? after;
    await this.streams.open(principal, id, lastEventId, req, res);
  }
}
