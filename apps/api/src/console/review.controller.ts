import { Controller, Get, Query, Req, Res, applyDecorators } from '@nestjs/common';
import { ApiBearerAuth, ApiQuery, ApiTags } from '@nestjs/swagger';
import { HOLD_REASONS, TerminalReason } from '@verity/status-model';
import type { Request, Response } from 'express';
import { z } from 'zod';
import { AnswerBytes } from '../answer-bytes';
import { CurrentPrincipal, Principal, Roles } from '../auth/principal';
import { cursorPageQuery, parseQuery } from '../http/parse';
import { ApiEndpoint, ApiPageQuery } from '../openapi';
import { ReviewService } from './review.service';

const QueueQuery = z.strictObject({
  connector: z.string().trim().max(100).optional(),
  // A blank search (`?q=%20`) is no search: trimmed to nothing, it matched no operation, and the queue answered as
  // empty. Refused instead, as a blank value of every other parameter is (an exactly empty one is not given).
  q: z.string().trim().min(1, 'a search text, not blank').max(200).optional(),
  ...cursorPageQuery('op'),
});
const ManualReviewQuery = QueueQuery.extend({
  // Only a reason an operation can be held for: any other (DENIED, PROVEN_ABSENT…) would list nothing, ever, which reads
  // as "no hold of that kind waits".
  reason: z.enum(HOLD_REASONS as [TerminalReason, ...TerminalReason[]]).optional(),
  escalated: z
    .enum(['true', 'false'])
    .transform((v) => v === 'true')
    .optional(),
});

/** A work queue: a page of operations as a ReviewQueue, filtered and paged by query parameters. */
const QueueEndpoint = (id: string, summary: string) =>
  applyDecorators(
    ApiEndpoint({ id, summary, response: { schema: 'ReviewQueue' }, problems: ['validation-error', 'answers-busy'] }),
    ApiQuery({
      name: 'connector',
      required: false,
      type: String,
      description:
        'only this connector’s operations; a name no connector has is 400 known_connector, unless one of ' +
        'the queue’s operations names it (a connector a later release removed)',
    }),
    ApiQuery({
      name: 'q',
      required: false,
      type: String,
      description: 'operation or execution id, key, action, intent or agent',
    }),
    ApiPageQuery(),
  );

/** The review console's work queues (reviewer role). Params in these views are masked: reviewers need no secrets. */
@ApiTags('review')
@ApiBearerAuth()
@Roles('reviewer')
@Controller('v1/review')
export class ReviewController {
  constructor(
    private readonly review: ReviewService,
    private readonly answerBytes: AnswerBytes,
  ) {}

  @Get('summary')
  @ApiEndpoint({
    id: 'getReviewSummary',
    summary: 'How many operations await approval or a manual review (reviewer)',
    response: { schema: 'ReviewSummary' },
  })
  summary(@CurrentPrincipal() principal: Principal) {
    return this.review.counts(principal);
  }

  @Get('approvals')
  @QueueEndpoint('listPendingApprovals', 'PREPARED operations whose approval is requested, newest first (reviewer)')
  approvals(
    @CurrentPrincipal() principal: Principal,
    @Query() query: unknown,
    @Req() req: Request,
    @Res({ passthrough: true }) res: Response,
  ) {
    return this.review.list(
      principal,
      'approvals',
      parseQuery(QueueQuery, query),
      this.answerBytes.forAnswer(req, res),
    );
  }

  @Get('manual-reviews')
  @QueueEndpoint(
    'listManualReviews',
    'MANUAL_REVIEW operations with their recovery obligation, newest first (reviewer)',
  )
  @ApiQuery({
    name: 'reason',
    required: false,
    enum: [...HOLD_REASONS],
    description: 'only holds for this reason (one an operation can be held in MANUAL_REVIEW for)',
  })
  @ApiQuery({ name: 'escalated', required: false, enum: ['true', 'false'] })
  manualReviews(
    @CurrentPrincipal() principal: Principal,
    @Query() query: unknown,
    @Req() req: Request,
    @Res({ passthrough: true }) res: Response,
  ) {
    return this.review.list(
      principal,
      'manual_reviews',
      parseQuery(ManualReviewQuery, query),
      this.answerBytes.forAnswer(req, res),
    );
  }
}
