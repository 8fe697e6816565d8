import { Body, Controller, Get, HttpCode, Param, Post, Query, Req, Res } from '@nestjs/common';
import { ApiBearerAuth, ApiHeader, ApiProduces, ApiQuery, ApiTags } from '@nestjs/swagger';
import { EXECUTION_STATUSES, ExecutionStatus } from '@verity/status-model';
import type { Request, Response } from 'express';
import { z } from 'zod';
import { findExecution } from '@verity/persistence';
import { AnswerBytes } from '../answer-bytes';
import { CurrentPrincipal, Principal, Roles } from '../auth/principal';
import { OwnInFlightBound } from '../auth/v1-in-flight';
import { ActsOn } from '../http/if-match';
import {
  cursorPageQuery,
  hasBody,
  idempotencyKeyOf,
  pageLimit,
  parseBody,
  parseQuery,
  requireJson,
} from '../http/parse';
import {
  CANCEL_EXAMPLE,
  CREATED_EXECUTION_EXAMPLE,
  EVENT_LIST_EXAMPLE,
  SUBMISSION_EXAMPLE,
  VERIFIED_EXECUTION_EXAMPLE,
} from '../openapi-examples';
import { ApiEndpoint, ApiPageQuery, schemaRef } from '../openapi';
import { CancelBody } from '../schemas';
import { StreamService } from '../stream/stream.service';
import { ExecutionsService } from './executions.service';

/** Kept for modules that imported these helpers from here before they moved to http/parse. */
export { parseQuery, requireJson } from '../http/parse';

const ListQuery = z.strictObject({
  status: z.enum(EXECUTION_STATUSES as [ExecutionStatus, ...ExecutionStatus[]]).optional(),
  ...cursorPageQuery('exe'),
});
const EventsQuery = z.strictObject({
  after: z.string().max(100).optional(),
  limit: pageLimit(1000, 500),
});
const StreamQuery = z.strictObject({ after: z.string().max(100).optional() });

const ID = { name: 'id', description: 'execution id (exe_…)' };

@ApiTags('executions')
@ApiBearerAuth()
@Controller('v1/executions')
export class ExecutionsController {
  constructor(
    private readonly executions: ExecutionsService,
    private readonly streams: StreamService,
    private readonly answerBytes: AnswerBytes,
  ) {}

  @Post()
  @Roles('agent')
  @ApiEndpoint({
    id: 'submitExecution',
    summary: 'Submit an execution',
    description:
      '201 means the execution and its operations are committed (I7), even when the queue is down. With an ' +
      'Idempotency-Key, the same key and body return the same execution with `Idempotent-Replayed: true`.',
    body: { schema: 'Submission', example: { summary: 'The README’s order 1234', value: SUBMISSION_EXAMPLE } },
    response: {
      status: 201,
      description: 'The execution, committed (or the earlier one, replayed)',
      schema: 'Execution',
      example: { summary: 'Committed, nothing sent yet', value: CREATED_EXECUTION_EXAMPLE },
      headers: {
        Location: { description: 'the execution’s URL', required: true, schema: { type: 'string' } },
        'Idempotent-Replayed': {
          description: '`true` when this is a replay of an earlier request',
          schema: { type: 'string' },
        },
      },
    },
    problems: ['validation-error', 'idempotency-key-in-flight', 'idempotency-key-reused', 'reference-unsettled'],
  })
  @ApiHeader({
    name: 'Idempotency-Key',
    required: false,
    description: '1–255 printable ASCII characters; scoped to the tenant, kept 24 h',
  })
  async submit(
    @CurrentPrincipal() principal: Principal,
    @Req() req: Request,
    @Res({ passthrough: true }) res: Response,
    @Body() body: unknown,
  ) {
    requireJson(req);
    const idempotencyKey = idempotencyKeyOf(req);
    const { execution, replayed } = await this.executions.submit(principal, body, idempotencyKey);
    res.status(201);
    res.setHeader('location', `/v1/executions/${execution.id}`);
    if (replayed) res.setHeader('idempotent-replayed', 'true');
    res.locals.executionId = execution.id;
    return execution;
  }

  @Get()
  @ApiEndpoint({
    id: 'listExecutions',
    summary: 'List this tenant’s executions, newest first (cursor pagination)',
    description:
      'A page holds at most `limit` executions, and fewer once those in it (with their operations) hold 1 MiB of ' +
      'stored text (one at least): `next_cursor` is then set. Read on until it is null.',
    response: {
      schema: 'ExecutionList',
      example: { summary: 'One page', value: { data: [VERIFIED_EXECUTION_EXAMPLE], next_cursor: null } },
    },
    problems: ['answers-busy'],
  })
  @ApiQuery({ name: 'status', required: false, schema: schemaRef('ExecutionStatus') })
  @ApiPageQuery()
  list(
    @CurrentPrincipal() principal: Principal,
    @Query() query: unknown,
    @Req() req: Request,
    @Res({ passthrough: true }) res: Response,
  ) {
    return this.executions.list(principal, parseQuery(ListQuery, query), this.answerBytes.forAnswer(req, res));
  }

  @Get(':id')
  @ApiEndpoint({
    id: 'getExecution',
    summary: 'One execution with its operations, effects and failure',
    params: [ID],
    response: {
      schema: 'Execution',
      example: { summary: 'Completed: the charge VERIFIED, the SMS ACKNOWLEDGED', value: VERIFIED_EXECUTION_EXAMPLE },
    },
    problems: ['answers-busy'],
  })
  get(
    @CurrentPrincipal() principal: Principal,
    @Param('id') id: string,
    @Req() req: Request,
    @Res({ passthrough: true }) res: Response,
  ) {
    return this.executions.get(principal, id, this.answerBytes.forAnswer(req, res));
  }

  @Get(':id/events')
  @ApiEndpoint({
    id: 'listExecutionEvents',
    summary: 'The append-only event log, in order, after an event id (or seq)',
    description:
      'A page holds at most `limit` events, and fewer once those in it hold 1 MiB of stored text (one at least): ' +
      '`next_cursor` is then set. Read on until it is null.',
    params: [ID],
    response: {
      schema: 'EventList',
      example: { summary: 'The first event and the charge’s VERIFIED', value: EVENT_LIST_EXAMPLE },
    },
  })
  @ApiQuery({
    name: 'after',
    required: false,
    type: String,
    description:
      'an event id (or seq): only later events. An event not of this execution, or a seq past its last event, is 400 ' +
      '(`known_event`), as on the stream',
  })
  @ApiQuery({ name: 'limit', required: false, schema: { type: 'integer', minimum: 1, maximum: 1000, default: 500 } })
  events(@CurrentPrincipal() principal: Principal, @Param('id') id: string, @Query() query: unknown) {
    const q = parseQuery(EventsQuery, query);
    return this.executions.events(principal, id, q.after, q.limit);
  }

  @Post(':id/cancel')
  @HttpCode(200)
  @Roles('agent', 'reviewer')
  @ApiEndpoint({
    id: 'cancelExecution',
    summary: 'Cancel an execution',
    description:
      'PREPARED operations become CANCELLED; anything already SENT keeps being reconciled (I11). The body is optional.',
    params: [ID],
    body: { schema: 'CancelRequest', required: false, example: { summary: 'With a reason', value: CANCEL_EXAMPLE } },
    response: { description: 'The execution, cancelled', schema: 'Execution' },
    problems: ['validation-error', 'execution-terminal', 'already-decided'],
  })
  @ActsOn(async (db, principal, { id }) => (await findExecution(db.manager, id, principal.tenantId)) !== null)
  cancel(
    @CurrentPrincipal() principal: Principal,
    @Param('id') id: string,
    @Req() req: Request,
    @Body() body: unknown,
  ) {
    let reason: string | undefined;
    if (hasBody(req)) {
      requireJson(req);
      reason = parseBody(CancelBody, body).reason;
    }
    return this.executions.cancel(principal, id, reason);
  }

  @Get(':id/stream')
  // Long-lived and bounded as a stream (MAX_STREAMS_PER_KEY): not among the key's requests in flight.
  @OwnInFlightBound()
  @ApiEndpoint({
    id: 'streamExecutionEvents',
    summary: 'Live events (server-sent events)',
    description:
      'Every event of the execution: `id:` is the event id, `event:` its type, `data:` the event as JSON. ' +
      'Send `Last-Event-ID` to resume after an event with no gap and no duplicate. Comment lines are heartbeats. ' +
      'Stays open while anything can still change (pending approvals and manual review included, also after the ' +
      'execution completed). Ends with `event: end`, data `{ "reason": "settled" | "deadline" | "key_revoked" }`: ' +
      'nothing can change any more; the deadline of a terminal execution passed with something still open; the key ' +
      'was revoked.',
    params: [ID],
    response: {
      description: 'The events as server-sent events, then `event: end`',
      content: {
        'text/event-stream': {
          schema: { type: 'string' },
          example:
            'id: evt_01m8pvhh9gtx1v9h3cbv1qxxrf\nevent: operation.status_changed\ndata: {"id":"evt_01m8pvhh9gtx1v9h3cbv1qxxrf","seq":11,"type":"operation.status_changed","to_status":"VERIFIED"}\n\n: heartbeat\n\nevent: end\ndata: {"reason":"settled"}\n\n',
        },
      },
    },
    problems: ['too-many-streams'],
  })
  @ApiHeader({ name: 'Last-Event-ID', required: false, description: 'resume after this event id' })
  @ApiQuery({
    name: 'after',
    required: false,
    type: String,
    description:
      'like Last-Event-ID, for clients that cannot set headers. Checked as the header is (400 `known_event` naming ' +
      '`after`) also when the header is sent; the stream then resumes after the header’s event',
  })
  @ApiProduces('text/event-stream')
  async stream(
    @CurrentPrincipal() principal: Principal,
    @Param('id') id: string,
    @Req() req: Request,
    @Res() res: Response,
    @Query() query: unknown,
  ) {
    const { after } = parseQuery(StreamQuery, query);
    const header = req.headers['last-event-id'];
    const lastEventId = typeof header === 'string' ? header : undefined;
    await this.streams.open(principal, id, { lastEventId, after }, req, res);
  }
}
